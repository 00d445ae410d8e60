"""Issue 12, defect 1: a full disk under the state directory. The whole `system start` tree rides
it out: the API keeps answering reads and refuses writes with 503 and why, the webhook listener
too, `runworkers` and `runscheduler` log, back off and keep running, no process is restarted,
and once space is freed everything resumes by itself with no accepted job lost (ARCHITECTURE
"Claims, leases and recovery": at-least-once, never lost)."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.live_api import Api, live_api, post_bytes
from tests.support.network import free_port
from tests.support.processes import ductile
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.process]

TOKEN = "tok-disk"
HOOK_SECRET = b"hook-secret"


@pytest.fixture
def small_disk(config_dir):
    """The config's state directory (its SQLite ledger, PID file, write gate) on a 20 MB tmpfs."""
    state = config_dir.db_path.parent
    state.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m,mode=0700", "tmpfs", str(state)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        if os.geteuid() != 0:
            pytest.skip(f"mounting a tmpfs needs root (CI runs as root): {mounted.stderr.strip()}")
        pytest.fail(f"cannot mount a tmpfs as root: {mounted.stderr.strip()}")
    try:
        yield state
    finally:
        if subprocess.run(["umount", str(state)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(state)], check=True)  # a process still holds a file


def fill(directory: Path) -> Path:
    """Write a file until the filesystem has no space left; returns it (delete it to free space)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for size in (1 << 20, 4096, 1):  # big writes, then whatever fits of a page, then bytes
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:  # ENOSPC
                continue
    finally:
        os.close(fd)
    return filler


class Gateway:
    def __init__(self, api: Api, hook_base: str):
        self.api, self.hook_base = api, hook_base

    def enqueue(self, n: int) -> tuple[int, dict]:
        return self.api.call("POST", "/plugin/stress/poll", {"payload": {"mode": "ok", "n": n}}, token=TOKEN)

    def job(self, job_id: str) -> dict:
        code, body = self.api.call("GET", f"/job/{job_id}", token=TOKEN)
        assert code == 200, body
        return body

    def webhook(self) -> tuple[int, dict]:
        body = b'{"message": "from a webhook"}'
        signature = "sha256=" + hmac.new(HOOK_SECRET, body, hashlib.sha256).hexdigest()
        headers = {"X-Signature-256": signature, "Content-Type": "application/json"}
        return post_bytes(self.hook_base + "/hook/echo", body, headers)


def test_a_full_disk_is_ridden_out_and_everything_resumes_when_space_returns(config_dir, small_disk):
    cfg = config_dir
    hook_port = free_port()
    cfg.service["lease_ttl"] = "5s"  # heartbeat every 1.25 s: the daemon meets the full disk at once
    # One at a time, a second each: jobs are running and waiting while the disk is full.
    cfg.plugins["stress"] = {"config": {"sleep": 1}, "parallelism": 1, "retry": {"max_attempts": 3}}
    # The scheduler writes every second too.
    cfg.plugins["py-greet"] = {"config": {"name": "Test"}, "schedules": [{"every": "1s", "command": "poll"}]}
    cfg.extra["tokens"] = [{"name": "hook", "key": HOOK_SECRET.decode()}]
    cfg.extra["webhooks"] = {
        "listen": f"127.0.0.1:{hook_port}",
        "endpoints": [
            {"path": "/hook/echo", "plugin": "echo", "secret_ref": "hook", "signature_header": "X-Signature-256"}
        ],
    }
    tokens = [{"name": "t", "token": TOKEN, "scopes": ["*"]}]
    with live_api(cfg, tokens, workers=True) as live:
        output, proc = live.output, live.proc
        gateway = Gateway(live.api, f"http://127.0.0.1:{hook_port}")
        output.wait_for("runscheduler started")
        output.wait_for("runworkers started")
        accepted = [gateway.enqueue(n)[1]["job_id"] for n in range(8)]

        filler = fill(small_disk)
        # Enqueue until the database has no room left: the refusal is a 503 that says why.
        refused = None
        for n in range(8, 2000):
            code, body = gateway.enqueue(n)
            if code == 202:
                accepted.append(body["job_id"])
                continue
            refused = (code, body)
            break
        assert refused is not None, "the database never filled up"
        code, body = refused
        assert code == 503, body
        assert "disk is full" in body["error"] and "nothing was recorded" in body["error"], body
        assert "read-only" not in body["error"], body
        # The CLI names the cause in the same words (issue 33, item 9).
        cli = ductile(cfg, "plugin", "run", "echo")
        assert cli.returncode == 1 and "its disk is full" in cli.stderr and "read-only" not in cli.stderr, cli
        # Reads still answer; the webhook listener refuses its write the same way.
        assert gateway.job(accepted[0])["job_id"] == accepted[0]
        assert gateway.api.call("GET", "/healthz", token=None)[0] == 200
        code, body = gateway.webhook()
        assert code == 503 and "disk is full" in body["error"], body

        # The daemons meet the full disk (claims, heartbeats, outcomes, scheduler ticks) and stay up.
        def outages() -> set[str]:
            pattern = r'"component": "(?:workers|scheduler)", "message": "([^"]+) failed: the database refuses'
            return set(re.findall(pattern, output.text))

        wait_for(
            lambda: (
                "scheduler tick" in outages() and outages() & {"claiming jobs", "heartbeat", "recovering lost jobs"}
            ),
            timeout=60,
            what="the scheduler and the workers to meet the full disk",
        )
        assert "exited with" not in output.text, output.text
        met = outages()

        filler.unlink()
        # Space is back: everything resumes by itself.
        after = wait_for(lambda: gateway.enqueue(9999)[1].get("job_id"), timeout=30, what="the API to accept again")
        hook = wait_for(lambda: (r := gateway.webhook())[0] == 202 and r[1], timeout=30, what="webhooks")
        accepted += [after, hook["job_id"]]
        wait_for(
            lambda: all(gateway.job(job_id)["status"] == "succeeded" for job_id in accepted),
            timeout=60,
            what=f"all {len(accepted)} accepted jobs to succeed",
        )
        for outage in met:
            output.wait_for(f"{outage} works again")
    text = output.finish()
    assert "exited with" not in text and "keeps exiting" not in text, text  # no process died
    assert proc.returncode == 0, text


def test_sqlite_answers_a_full_disk_at_commit_with_sqlite_full_and_records_nothing(small_disk):
    """What ledger.writes.group_commit.refused_commit relies on: the dirty pages of a transaction
    stay in SQLite's cache until its COMMIT writes them to the WAL; with no space left that COMMIT
    fails with SQLITE_FULL and nothing of the transaction is in the database. The group commit
    answers such a write "nothing was recorded"; before, a disk that filled at the COMMIT rather
    than at an INSERT (a matter of timing in the test above) answered "it may have been recorded"."""
    import sqlite3

    path = small_disk / "ledger.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, body TEXT)")
    filler = fill(small_disk)
    db.execute("BEGIN")
    db.execute("INSERT INTO jobs (body) VALUES (?)", ["x" * 2000])  # into the cache, not the WAL yet
    with pytest.raises(sqlite3.OperationalError) as refused:
        db.execute("COMMIT")
    assert refused.value.sqlite_errorcode == sqlite3.SQLITE_FULL, refused.value
    assert not db.in_transaction  # SQLite rolled it back itself
    db.close()
    filler.unlink()
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)
