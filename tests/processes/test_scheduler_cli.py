"""`runscheduler` as a real process, several of them racing on one database, and the operator's
commands: `system scheduler`, `schedule pause|resume`, `system breaker`, `system reset`."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.checkout import REPO
from tests.support.processes import cli_env, ductile, ductile_json, ledger, start_workers

pytestmark = pytest.mark.postgres

PAST = "2026-01-01T00:00:00Z"  # an `at` that is already due: it fires at the first tick


@pytest.fixture
def cfg(process_db):
    process_db.plugins["stress"] = {
        "config": {},
        "retry": {"max_attempts": 1},
        "max_outstanding_polls": 100,
        "schedules": [{"id": "tick", "every": "1h", "payload": {"mode": "ok"}}],
    }
    process_db.write()
    return process_db


def runscheduler_once(cfg) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "runscheduler", "--once", "--config-dir", str(cfg.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(cfg),
        cwd=REPO,
    )


def test_system_scheduler_shows_entries_before_and_after_the_scheduler_ran(cfg):
    code, before = ductile_json(cfg, "system", "scheduler")
    assert code == 0
    (entry,) = before["entries"]
    assert (entry["plugin"], entry["schedule_id"], entry["status"], entry["kind"]) == (
        "stress",
        "tick",
        "not_started",
        "every",
    )
    # A new `every` entry runs at once (not at the next hour mark), then an hour after that run.
    assert abs(datetime.fromisoformat(entry["next_run_at"]) - datetime.now(UTC)) < timedelta(minutes=1)
    proc = runscheduler_once(cfg)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    code, after = ductile_json(cfg, "system", "scheduler")
    (fired,) = after["entries"]
    assert fired["status"] == "active" and fired["last_job_id"]
    last_fired = datetime.fromisoformat(fired["last_fired_at"])
    assert datetime.fromisoformat(fired["next_run_at"]) == last_fired + timedelta(hours=1)


def test_pause_and_resume_by_plugin_or_entry_with_dry_run(cfg):
    assert runscheduler_once(cfg).wait(timeout=60) == 0
    code, preview = ductile_json(cfg, "schedule", "pause", "stress:tick", "--dry-run")
    assert code == 0 and preview["changed"] == ["stress:tick"]
    assert ductile_json(cfg, "system", "scheduler")[1]["entries"][0]["status"] == "active"
    code, paused = ductile_json(cfg, "schedule", "pause", "stress")
    assert paused["changed"] == ["stress:tick"]
    entry = ductile_json(cfg, "system", "scheduler")[1]["entries"][0]
    assert entry["status"] == "paused_manual" and entry["reason"].startswith("paused by cli at ")
    assert runscheduler_once(cfg).wait(timeout=60) == 0  # a restart keeps the manual pause
    assert ductile_json(cfg, "system", "scheduler")[1]["entries"][0]["status"] == "paused_manual"
    code, resumed = ductile_json(cfg, "schedule", "resume", "stress:tick")
    assert resumed["changed"] == ["stress:tick"]
    assert ductile_json(cfg, "system", "scheduler")[1]["entries"][0]["status"] == "active"
    proc = ductile(cfg, "schedule", "pause", "stress:nope")
    assert proc.returncode == 2 and "no schedule entry 'stress:nope'" in proc.stderr


def test_three_schedulers_racing_fire_each_due_run_exactly_once(cfg):
    cfg.plugins["stress"]["schedules"] = [
        {"id": f"s{n}", "at": PAST, "if_running": "queue", "payload": {"mode": "ok"}} for n in range(20)
    ]
    cfg.write()
    racers = [runscheduler_once(cfg) for _ in range(3)]
    for proc in racers:
        output = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, output
    fired = [j for j in ledger(cfg) if j["plugin"] == "stress"]
    assert len(fired) == 20
    code, view = ductile_json(cfg, "system", "scheduler")
    assert code == 0 and {e["status"] for e in view["entries"]} == {"exhausted"}


def test_breaker_open_is_shown_counted_and_reset_by_the_operator(cfg):
    cfg.plugins["stress"]["schedules"] = [{"id": "boom", "at": PAST, "payload": {"mode": "error"}}]
    cfg.plugins["stress"]["circuit_breaker"] = {"threshold": 1, "reset_after": "1h"}
    cfg.write()
    assert runscheduler_once(cfg).wait(timeout=60) == 0
    workers = start_workers(cfg, "--once")
    output = workers.communicate(timeout=120)[0]
    assert workers.returncode == 0, output
    code, breaker = ductile_json(cfg, "system", "breaker", "stress")
    assert (breaker["command"], breaker["state"], breaker["failure_count"]) == ("poll", "open", 1)
    assert breaker["transitions"][0]["reason"] == "failure_threshold" and breaker["transitions"][0]["job_id"]
    assert ductile_json(cfg, "system", "status")[1]["plugins_circuit_open"] == 1
    text = ductile(cfg, "system", "breaker").stdout
    assert "Circuit breaker for stress (poll)\nState: open (failure_count=1)" in text
    code, preview = ductile_json(cfg, "system", "reset", "stress", "--dry-run")
    assert preview["changed"] == ["poll"] and ductile_json(cfg, "system", "status")[1]["plugins_circuit_open"] == 1
    code, done = ductile_json(cfg, "system", "reset", "stress", "--command", "poll")
    assert code == 0 and done["changed"] == ["poll"]
    breaker = ductile_json(cfg, "system", "breaker", "stress")[1]
    assert breaker["state"] == "closed" and breaker["transitions"][0]["reason"] == "manual_reset"
    assert ductile(cfg, "system", "reset", "ghost").returncode == 1
