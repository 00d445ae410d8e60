"""`ductile system watch` as a user runs it (spec 000 "Monitoring & Observability", Real-Time
Dashboard (TUI)): one snapshot with `--once`, machine-readable with `--json` (once, or a line per
refresh), read from the local ledger or over the API with `--api-url` and a token; clear errors
and exit codes when it cannot. The interactive view is driven under tmux in test_watch_tmux.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.support.checkout import REPO
from tests.support.live_api import live_api
from tests.support.processes import cli_env, ductile, ductile_json

pytestmark = pytest.mark.postgres

TOKEN = "tok-watch"


@pytest.fixture
def worked(process_db):
    """A ledger with real runs: two echo jobs ended well, one stress job failed."""
    cfg = process_db
    cfg.write()
    for plugin, payload in (("echo", "{}"), ("echo", "{}"), ("stress", '{"mode": "error"}')):
        ran = ductile(cfg, "plugin", "run", plugin, "--payload", payload)
        assert ran.returncode in (0, 1), ran.stderr
    return cfg


def test_once_json_is_the_snapshot_of_the_local_ledger(worked):
    code, snap = ductile_json(worked, "system", "watch", "--once")
    assert code == 0
    assert snap["queue"]["succeeded"] == 2 and snap["queue"]["dead"] == 1
    assert snap["throughput"]["finished_last_hour"] == 3 and snap["throughput"]["failed_last_hour"] == 1
    assert sum(snap["throughput"]["finished"]) == 3
    assert {p["plugin"] for p in snap["latency"]["plugins"]} == {"echo", "stress"}
    (failure,) = snap["failures"]
    assert failure["plugin"] == "stress" and "simulated failure" in failure["last_error"]
    assert snap["gateway"]["config_dir"] == str(worked.path)
    assert snap["running"] == [] and snap["workers"] == []


def test_once_prints_the_view(worked):
    shown = ductile(worked, "system", "watch", "--once")
    assert shown.returncode == 0, shown.stderr
    for title in ("Queue and throughput", "Running (0)", "Latest failures", "Plugin latency", "Recent events"):
        assert title in shown.stdout
    assert "2 succeeded" in shown.stdout and "1 dead" in shown.stdout
    assert "simulated failure" in shown.stdout


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_json_without_once_is_a_line_per_refresh_until_interrupted(worked, stop):
    argv = [sys.executable, str(REPO / "manage.py"), "system", "watch", "--json", "--interval", "0.2"]
    proc = subprocess.Popen(
        [*argv, "--config-dir", str(worked.path)],
        env=cli_env(worked),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl+C reaches a command in a terminal's foreground with SIGINT at its default; a suite
        # started in the background of a non-interactive shell (as CI's may be) would otherwise
        # hand it down ignored, and Python keeps it so.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        lines = [json.loads(proc.stdout.readline()) for _ in range(2)]
    finally:
        proc.send_signal(stop)
        proc.wait(timeout=30)
    assert all(line["queue"]["succeeded"] == 2 for line in lines)
    assert proc.returncode == 0


def test_over_the_api_with_a_token(worked):
    tokens = [
        {"name": "watch", "token": TOKEN, "scopes": ["jobs:ro"]},
        {"name": "other", "token": "tok-other", "scopes": ["plugin:ro"]},
    ]
    with live_api(worked, tokens) as served:
        url = f"http://127.0.0.1:{served.port}"
        code, snap = ductile_json(worked, "system", "watch", "--once", "--api-url", url, "--api-key", TOKEN)
        assert code == 0 and snap["queue"]["succeeded"] == 2
        # The token from the environment, as `ductile api` takes it.
        shown = ductile(worked, "system", "watch", "--once", "--api-url", url, DUCTILE_API_KEY=TOKEN)
        assert shown.returncode == 0 and url in shown.stdout and "2 succeeded" in shown.stdout
        refused = ductile(worked, "system", "watch", "--once", "--api-url", url, "--api-key", "tok-other")
        assert refused.returncode == 1
        assert "403" in refused.stderr and "jobs:ro" in refused.stderr
    gone = ductile(worked, "system", "watch", "--once", "--api-url", url, "--api-key", TOKEN)
    assert gone.returncode == 1 and "cannot reach" in gone.stderr


def test_the_live_view_needs_a_terminal_and_a_positive_interval(worked):
    piped = ductile(worked, "system", "watch")
    assert piped.returncode == 2 and "needs a terminal" in piped.stderr and "--once" in piped.stderr
    code, body = ductile_json(worked, "system", "watch", "--once", "--interval", "0")
    assert code == 2 and "--interval" in body["error"]
