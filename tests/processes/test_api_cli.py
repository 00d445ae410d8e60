"""`ductile api PATH` against a real API (`system start`, gunicorn): where the URL and the token
come from, how `-f`, `-b`, `-H` and `-X` shape the request, what is printed, and the exit codes
(0 on 2xx, 1 on any other answer or an unreachable API, 2 on usage, 78 on a broken config)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.live_api import live_api
from tests.support.network import free_port
from tests.support.processes import cli_env, ductile, ductile_json
from tests.support.waiting import wait_for

# Not `postgres`: the API's database plays no part in a client; SQLite only.

ADMIN, READER = "tok-admin", "tok-reader"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One API for the module's tests (starting gunicorn costs seconds); each test's jobs are its own."""
    cfg = ConfigDir(tmp_path_factory.mktemp("api-cli") / "config")
    cfg.extra["pipelines"] = [{"name": "flow", "on": "flow.start", "steps": [{"id": "a", "uses": "echo"}]}]
    tokens = [
        {"name": "reader", "token": READER, "scopes": ["plugin:ro", "jobs:ro"]},
        {"name": "admin", "token": ADMIN, "scopes": ["*"]},
    ]
    with live_api(cfg, tokens) as live:
        yield cfg, live


def api(cfg, *args: str, DUCTILE_API_KEY: str = "", DUCTILE_TOKEN: str = ""):
    # No token in the environment unless a test puts one there: the config's `*` token is the default.
    # The two variables are named, not **env: mypy cannot tell env's keys from ductile()'s options.
    return ductile(cfg, "api", *args, DUCTILE_API_KEY=DUCTILE_API_KEY, DUCTILE_TOKEN=DUCTILE_TOKEN)


def test_a_plugin_trigger_with_fields_sends_them_as_the_payload_and_prints_the_answer(served):
    cfg, _ = served
    proc = api(cfg, "/plugin/echo/poll", "-f", "message=hello there", "-f", "n=1")
    assert proc.returncode == 0, proc.stderr
    queued = json.loads(proc.stdout)
    assert queued["status"] == "queued" and queued["plugin"] == "echo"
    # The job carries exactly the payload the Handbook's `-f message="hello"` means.
    code, job = ductile_json(cfg, "job", "inspect", queued["job_id"])
    assert code == 0
    assert job["payload"] == {"message": "hello there", "n": "1"}
    assert job["submitted_by"] == "api"


def test_url_comes_from_api_listen_and_the_token_from_the_configs_star_token(served):
    cfg, _ = served
    proc = api(cfg, "/jobs", "-v")
    assert proc.returncode == 0, proc.stderr
    assert "jobs" in json.loads(proc.stdout)
    assert f"GET http://127.0.0.1:{served[1].port}/jobs" in proc.stderr
    assert ADMIN not in proc.stdout + proc.stderr  # never shown


def test_token_precedence_flag_then_environment_then_config(served):
    cfg, _ = served
    # The reader may not reload: which token was sent shows in the answer.
    assert api(cfg, "/system/reload", "-X", "POST").returncode == 0  # the config's `*` token
    refused = api(cfg, "/system/reload", "-X", "POST", DUCTILE_API_KEY=READER)
    assert refused.returncode == 1
    assert "token lacks scope" in json.loads(refused.stdout)["error"]
    assert "error: HTTP 403" in refused.stderr
    assert api(cfg, "/system/reload", "-X", "POST", DUCTILE_TOKEN=READER).returncode == 1
    assert api(cfg, "/system/reload", "-X", "POST", "--api-key", ADMIN, DUCTILE_API_KEY=READER).returncode == 0
    assert api(cfg, "/system/reload", "-X", "POST", "--api-key", "wrong").returncode == 1


def test_fields_on_a_get_are_the_query_string(served):
    cfg, _ = served
    api(cfg, "/plugin/echo/health", "-f", "x=1")
    proc = api(cfg, "/jobs", "-f", "command=health", "-f", "limit=1", "--json")
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["status"] == 200
    assert [j["command"] for j in answer["body"]["jobs"]] == ["health"]
    bad = api(cfg, "/jobs", "-f", "status=weird", "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["status"] == 400


def test_a_raw_body_and_headers_are_sent_as_given(served, tmp_path):
    cfg, _ = served
    body = json.dumps({"payload": {"message": "raw"}, "dedupe_key": "cli-raw-1"})
    first = api(cfg, "/plugin/echo/poll", "-b", body)
    assert first.returncode == 0, first.stderr
    file = tmp_path / "body.json"
    file.write_text(body)
    again = api(cfg, "/plugin/echo/poll", "-b", f"@{file}")
    assert again.returncode == 0, again.stderr
    for proc in (first, again):
        _, job = ductile_json(cfg, "job", "inspect", json.loads(proc.stdout)["job_id"])
        assert job["payload"] == {"message": "raw"} and job["dedupe_key"] == "cli-raw-1"
    # -H replaces a default header: a wrong token instead of the config's is refused (401).
    refused = api(cfg, "/plugin/echo/poll", "-b", body, "-H", "Authorization: Bearer not-a-token")
    assert refused.returncode == 1 and "401" in refused.stderr
    # A body the API cannot parse is the API's 400, printed.
    broken = api(cfg, "/plugin/echo/poll", "-b", "{not json")
    assert broken.returncode == 1 and "error" in json.loads(broken.stdout)


def test_pipeline_fields_are_the_payload_too(served):
    cfg, _ = served
    proc = api(cfg, "/pipeline/flow", "-f", "message=via pipeline")
    assert proc.returncode == 0, proc.stderr
    started = json.loads(proc.stdout)
    assert started["plugin"] == "pipeline" and started["command"] == "flow"
    _, job = ductile_json(cfg, "job", "inspect", started["job_id"])
    assert job["payload"] == {"message": "via pipeline"}


def test_non_2xx_answers_exit_1_with_the_body_printed(served):
    cfg, _ = served
    missing = api(cfg, "/job/no-such-job")
    assert missing.returncode == 1
    assert json.loads(missing.stdout) == {"error": "job not found", "detail": "no job with id 'no-such-job'"}
    assert api(cfg, "/healthz").returncode == 0


def test_events_are_streamed_as_they_arrive(served):
    cfg, _ = served
    env = cli_env(cfg, DUCTILE_API_KEY="", DUCTILE_TOKEN="")
    argv = [sys.executable, str(REPO / "manage.py"), "api", "/events", "--config-dir", str(cfg.path)]
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    stdout = proc.stdout
    assert stdout is not None  # stdout=PIPE
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: ": stream open\n" in lines, timeout=30, what="the stream to open")
        run = ductile(cfg, "plugin", "run", "echo", "--payload", '{"message": "streamed"}')
        assert run.returncode == 0, run.stderr
        wait_for(lambda: any("streamed" in line and "echo.poll" in line for line in lines), what="the event")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_usage_errors_exit_2_and_send_nothing(served):
    cfg, _ = served
    for args in (
        ["/plugin/echo/poll", "-f", "novalue"],
        ["/plugin/echo/poll", "-f", "=x"],
        ["/plugin/echo/poll", "-H", "no colon"],
        ["/plugin/echo/poll", "-f", "a=1", "-b", "{}"],
        ["/plugin/echo/poll", "-b", "@/no/such/file"],
        ["http://elsewhere/jobs"],
        ["/jobs", "-X", "GE T"],
        [],
    ):
        proc = api(cfg, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    _, jobs = ductile_json(cfg, "job", "logs")  # a harmless read still works
    assert "logs" in jobs


def test_dry_run_shows_the_request_with_the_token_hidden_and_sends_nothing(served):
    cfg, live = served
    before = live.api.call("GET", "/jobs?limit=1000")[1]["total"]
    proc = api(cfg, "/plugin/echo/poll", "-f", "message=dry", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    request = json.loads(proc.stdout)["request"]
    assert request["method"] == "POST"
    assert request["url"] == f"http://127.0.0.1:{live.port}/plugin/echo/poll"
    assert request["body"] == {"payload": {"message": "dry"}}
    assert request["headers"]["Authorization"] == "Bearer ***"
    assert ADMIN not in proc.stdout
    assert live.api.call("GET", "/jobs?limit=1000")[1]["total"] == before


def test_an_unreachable_api_exits_1_and_says_where_it_looked(served):
    cfg, _ = served
    proc = api(cfg, "/healthz", "--api-url", f"http://127.0.0.1:{free_port()}")
    assert proc.returncode == 1
    assert "cannot reach the API at http://127.0.0.1:" in proc.stderr and "Connection refused" in proc.stderr


def test_a_broken_config_exits_78_unless_url_and_token_are_given(tmp_path):
    cfg = ConfigDir(tmp_path / "config")
    cfg.write()
    (cfg.path / "config.yaml").write_text("plugins: [not, a, mapping\n")
    proc = api(cfg, "/healthz")
    assert proc.returncode == 78, proc.stderr
    given = api(cfg, "/healthz", "--api-url", f"http://127.0.0.1:{free_port()}", "--api-key", "k", "--dry-run")
    assert given.returncode == 0, given.stderr
