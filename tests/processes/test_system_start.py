"""`system start` as an operator runs it: gunicorn serving the API, runworkers and the scheduler
under one supervisor, driven over real HTTP: a plugin trigger run to completion, synchronous
pipelines (success, timeout, 429), SIGHUP reloading everything, SIGTERM draining everything."""

from __future__ import annotations

import hashlib
import hmac
import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gateway.storage.database import CHECKED_ENV
from tests.support.checkout import REPO
from tests.support.live_api import TOKEN, Api, post_bytes
from tests.support.network import free_port
from tests.support.processes import children, cli_env, descendants, ductile, stop_gracefully
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres


class SystemApi(Api):
    """The API `system start` serves, and the webhook listener it serves on a port of its own."""

    def __init__(self, port: int, hook_port: int):
        super().__init__(port)
        self.hook_base = f"http://127.0.0.1:{hook_port}"


@pytest.fixture
def system(process_db):
    port, hook_port = free_port(), free_port()
    cfg = process_db
    cfg.extra["webhooks"] = {
        "listen": f"127.0.0.1:{hook_port}",
        "endpoints": [
            {"path": "/hook/echo", "plugin": "echo", "secret_ref": "hook", "signature_header": "X-Signature-256"}
        ],
    }
    cfg.extra["tokens"] = [{"name": "hook", "key": "hook-secret"}]
    cfg.extra["api"] = {
        "listen": f"127.0.0.1:{port}",
        "max_concurrent_sync": 1,
        "max_sync_timeout": "20s",
        "auth": {"tokens": [{"name": "admin", "token": TOKEN, "scopes": ["*"]}]},
    }
    cfg.extra["pipelines"] = [
        {
            "name": "quick",
            "on": "quick.start",
            "execution_mode": "synchronous",
            "steps": [
                {"id": "a", "uses": "echo", "with": {"message": "hi {payload.who}"}},
                {"id": "b", "uses": "probe"},
            ],
        },
        {
            "name": "slow",
            "on": "slow.start",
            "execution_mode": "synchronous",
            "timeout": "2s",
            "steps": [{"id": "nap", "uses": "stress", "with": {"mode": "ok", "sleep": 4}}],
        },
    ]
    cfg.write()
    env = cli_env(cfg)
    # To a file, not a pipe nobody reads: a full pipe would block every process of the tree that
    # logs. Its end is printed at teardown (pytest shows it with a failure).
    log_path = cfg.path.parent / "system-start.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "system", "start", "--config-dir", str(cfg.path)],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    api = SystemApi(port, hook_port)
    try:
        wait_for(api.up, timeout=60, what="the API to answer /healthz")
        yield api, proc, cfg
    finally:
        stop_gracefully(proc)
        log.close()
        print("".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-200:]))


def test_a_plugin_trigger_runs_to_completion_through_the_whole_tree(system):
    api, _, _ = system
    code, queued = api.call("POST", "/plugin/echo/poll", {"payload": {"message": "over http"}})
    assert code == 202
    wait_for(lambda: api.call("GET", f"/job/{queued['job_id']}")[1]["status"] == "succeeded", what="the job to run")
    code, job = api.call("GET", f"/job/{queued['job_id']}")
    assert job["submitted_by"] == "api" and job["result"]["status"] == "ok"
    assert api.call("GET", "/healthz", token=None)[1]["workers"] >= 1


def test_the_served_selfcheck_knows_the_lock_is_its_own_gateways(system):
    """GET /system/selfcheck from a gunicorn worker: the PID file names `system start`, two
    processes up the tree, which is this gateway holding its own lock (healthy); the database
    checks are skipped while it runs, as the CLI's are."""
    api, proc, cfg = system
    assert (cfg.db_path.parent / "ductile.pid").stat().st_mode & 0o777 == 0o600  # a lock file (spec 000 §13.2)
    code, body = api.call("GET", "/system/selfcheck")
    assert code == 200 and body["ok"] is True, body
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["pid_lock"]["status"] == "ok" and f"pid {proc.pid}" in checks["pid_lock"]["detail"]
    assert [checks[n]["status"] for n in ("db_integrity", "db_schema", "queue_terminal_freshness")] == ["skipped"] * 3


def test_synchronous_pipelines_answer_with_the_result_or_202_past_their_timeout(system):
    api, _, _ = system
    code, answer = api.call("POST", "/pipeline/quick", {"payload": {"who": "ada"}})
    assert code == 200, answer
    assert answer["status"] == "succeeded" and len(answer["tree"]) == 2
    assert answer["result"]["result"]["request"]["event"]["payload"]["who"] == "ada"  # probe, the last step
    code, late = api.call("POST", "/pipeline/slow", {})
    assert code == 202 and late["timeout_exceeded"] is True and late["status"] == "running"
    assert api.call("POST", "/pipeline/quick?async=true", {"payload": {"who": "bo"}})[0] == 202


def test_past_max_concurrent_sync_the_next_caller_gets_429(system):
    api, _, _ = system
    results: list[int] = []
    first = threading.Thread(target=lambda: results.append(api.call("POST", "/pipeline/slow", {})[0]))
    first.start()
    wait_for(lambda: api.call("GET", "/jobs?plugin=stress&status=running")[1]["total"] == 1, what="the slow run")
    code, body = api.call("POST", "/pipeline/quick", {"payload": {"who": "x"}})
    first.join(timeout=30)
    assert code == 429 and "max_concurrent_sync" in body["error"]
    assert results == [202]


def test_sighup_reloads_and_sigterm_drains_every_process(system):
    api, proc, cfg = system
    cfg.extra["pipelines"].append({"name": "added", "on": "added.start", "steps": [{"uses": "echo"}]})
    cfg.write()
    proc.send_signal(signal.SIGHUP)
    wait_for(
        lambda: any(s["name"] == "pipeline.added" for s in api.call("GET", "/skills", token=None)[1]["skills"]),
        timeout=30,
        what="the API to serve the reloaded config",
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 0
    assert not api.up()
    assert not (cfg.db_path.parent / "ductile.pid").exists()


def test_the_webhook_listener_runs_on_its_own_port(system):
    api, _, _ = system
    body = b'{"message": "from a webhook"}'
    signature = "sha256=" + hmac.new(b"hook-secret", body, hashlib.sha256).hexdigest()

    def post(headers):
        return post_bytes(api.hook_base + "/hook/echo", body, headers)

    wait_for(lambda: post({"X-Signature-256": "sha256=00"})[0] == 403, what="the webhook listener")
    code, accepted = post({"X-Signature-256": signature, "Content-Type": "application/json"})
    assert code == 202
    wait_for(lambda: api.call("GET", f"/job/{accepted['job_id']}")[1]["status"] == "succeeded", what="the job")
    assert api.call("GET", f"/job/{accepted['job_id']}")[1]["submitted_by"] == "webhook"
    # The API's routes are not served on the webhook port.
    assert post({"X-Signature-256": signature})[0] == 202
    request = urllib.request.Request(api.hook_base + "/jobs")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code in (404, 405)


def environment_of(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


def test_the_tree_reads_the_ledger_for_its_start_up_check_once(system):
    """`system start` checks the SQLite ledger before it starts anything and hands its children
    the file's stamp, so they do not read every page of it again (on a 2 GB ledger, ~3 s each
    warm and ~30 s cold). On PostgreSQL there is no file to check, and no stamp."""
    _, proc, cfg = system
    started = {
        cmdline: pid
        for pid, cmdline in descendants(proc.pid).items()
        if "runworkers" in cmdline or "gunicorn" in cmdline
    }
    assert any("runworkers" in c for c in started) and any("gunicorn" in c for c in started), started
    stamps = {cmdline: environment_of(pid).get(CHECKED_ENV) for cmdline, pid in started.items()}
    if cfg.database_url:
        assert set(stamps.values()) == {None}, stamps
        return
    ledger_file = cfg.db_path.stat()
    for cmdline, stamp in stamps.items():
        assert stamp is not None, (cmdline, stamps)
        device, inode = stamp.split(":")[:2]
        assert (int(device), int(inode)) == (ledger_file.st_dev, ledger_file.st_ino), (cmdline, stamp)


def gunicorn_workers(supervisor: int) -> set[int]:
    """The workers of every gunicorn (the API's, the webhook listener's) under `supervisor`."""
    tree = descendants(supervisor)
    masters = [pid for pid in children(supervisor) if "gunicorn" in tree.get(pid, "")]
    return {worker for master in masters for worker in children(master)}


def test_system_reload_and_post_system_reload_reach_every_process(system):
    """The CLI and the API both find the supervisor through its PID file; a new alias then runs,
    which takes the API (accepting it) and the workers (running it) both reloaded."""
    api, proc, cfg = system

    def runs(alias: str) -> None:
        def accepted():
            code, body = api.call("POST", f"/plugin/{alias}/poll", {"payload": {"message": alias}})
            return body if code == 202 else None

        job = wait_for(accepted, timeout=30, what=f"the API to accept {alias}")
        wait_for(
            lambda: api.call("GET", f"/job/{job['job_id']}")[1]["status"] == "succeeded",
            timeout=30,
            what=f"the workers to run {alias}",
        )

    cfg.plugins["echo-two"] = {"uses": "echo", "config": {"message": "two"}}
    cfg.write()
    dry = ductile(cfg, "system", "reload", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout) == {
        "pid": proc.pid,
        "signalled": False,
        "dry_run": True,
        "config_dir": str(cfg.path),
    }
    assert api.call("POST", "/plugin/echo-two/poll", {"payload": {}})[0] == 404  # nothing reloaded yet
    reload = ductile(cfg, "system", "reload", "--json")
    assert reload.returncode == 0 and json.loads(reload.stdout)["pid"] == proc.pid
    runs("echo-two")

    cfg.plugins["echo-three"] = {"uses": "echo", "config": {"message": "three"}}
    cfg.write()
    before = gunicorn_workers(proc.pid)
    code, body = api.call("POST", "/system/reload")
    assert code == 200 and body["supervisor_pid"] == proc.pid, body
    runs("echo-three")
    assert gunicorn_workers(proc.pid) == before  # reloaded in place: no worker started again

    cfg.service["max_workers"] = 0  # invalid: refused before anything is signalled
    cfg.write()
    refused = ductile(cfg, "system", "reload")
    assert refused.returncode == 78 and "not signalled" in refused.stderr
    code, body = api.call("POST", "/system/reload")
    assert code == 409, body
    runs("echo-three")  # still running the last good config
