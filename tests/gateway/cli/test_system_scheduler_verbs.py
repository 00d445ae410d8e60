"""`system scheduler`, `system breaker` and `system reset` run in-process (call_command) against a
real ledger: the shapes and words a user of the original meets (items 111, 112, audit new-3)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command

from gateway.daemon.scheduler import Scheduler
from gateway.runtime import RUNTIME
from ledger.models import BreakerState, CircuitBreaker
from ledger.models.breakers import record_scheduled_outcome
from tests.support.processes import ductile_json
from tests.support.runtime import installed_runtime

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

T0 = datetime(2026, 11, 28, 6, 11, 37, tzinfo=UTC)


def system(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("system", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def system_json(*args: str) -> Any:
    code, out, err = system(*args, "--json")
    assert code == 0, (out, err)
    return json.loads(out)


@pytest.fixture
def cfg(config_dir):
    config_dir.plugins["stress"]["schedules"] = [
        {"id": "seven", "every": "7m"},
        {"id": "nine", "cron": "0 9 * * 1-5", "timezone": "Australia/Sydney"},
        {"id": "once", "at": "2027-03-15T14:00:00+11:00"},
        {"id": "boot", "after": "30s"},
    ]
    with installed_runtime(config_dir):  # the runtime before this test comes back after it
        yield config_dir


def test_system_scheduler_json_gives_plain_values_not_python_reprs(cfg):
    """Audit new-3: `"when": "Interval(text='7m', ...)"` was printed."""
    code, out, _ = system("scheduler", "--json")
    assert code == 0 and "Interval(" not in out and "datetime." not in out and "timedelta" not in out
    entries = {e["schedule_id"]: e for e in json.loads(out)["entries"]}
    assert {k: (e["mode"], e["when"]) for k, e in entries.items()} == {
        "seven": ("every", "7m"),
        "nine": ("cron", "0 9 * * 1-5"),
        "once": ("at", "2027-03-15T03:00:00Z"),
        "boot": ("after", "30s"),
    }
    assert entries["nine"]["timezone"] == "Australia/Sydney"


def test_system_scheduler_shows_the_next_run_an_interval_after_the_last_success(cfg):
    """Item 102 as `system scheduler` shows it: a new `every` entry is due at once; after a
    success, an interval after it ended (not the next 7-minute mark of the clock)."""
    loop = Scheduler(RUNTIME, clock=lambda: T0, install_signals=False)
    loop.start(T0)
    entry = next(e for e in system_json("scheduler")["entries"] if e["schedule_id"] == "seven")
    assert (entry["status"], entry["next_run_at"]) == ("active", "2026-11-28T06:11:37Z")


def test_reset_of_a_plugin_whose_breaker_never_counted_says_so_in_the_originals_words(cfg):
    """Item 111: `system reset echo` was `error: no circuit breaker for echo`, exit 1."""
    code, out, err = system("reset", "echo")
    assert (code, out.strip(), err) == (0, "Reset circuit breaker for echo (poll)", "")
    assert system_json("reset", "echo") == {"plugin": "echo", "reset": ["poll"], "changed": [], "dry_run": False}
    code, _, err = system("reset", "ghost")
    assert code == 1 and "unknown plugin: ghost" in err


def test_reset_closes_an_open_breaker_and_says_which(cfg):
    for n in range(3):
        record_scheduled_outcome("stress", "poll", f"job-{n}", succeeded=False, threshold=3)
    assert CircuitBreaker.objects.get(plugin="stress").state == BreakerState.OPEN
    preview = system_json("reset", "stress", "--dry-run")
    assert (preview["reset"], preview["changed"]) == (["poll"], ["poll"])
    code, out, _ = system("reset", "stress")
    assert (code, out.strip()) == (0, "Reset circuit breaker for stress (poll)")
    assert CircuitBreaker.objects.get(plugin="stress").state == BreakerState.CLOSED


def test_breaker_json_is_the_originals_shape_with_transitions(cfg):
    """Item 112: `{"breakers": [...]}` with `history` became the original's object with `transitions`."""
    for n in range(3):
        record_scheduled_outcome("stress", "poll", f"job-{n}", succeeded=False, threshold=3)
    report = system_json("breaker", "stress")
    assert set(report) == {
        "plugin",
        "command",
        "state",
        "failure_count",
        "opened_at",
        "last_failure_at",
        "last_job_id",
        "updated_at",
        "transitions",
    }
    assert (report["plugin"], report["command"], report["state"], report["failure_count"]) == (
        "stress",
        "poll",
        "open",
        3,
    )
    (opened,) = report["transitions"]
    assert {k: opened[k] for k in ("from_state", "to_state", "reason", "failure_count", "job_id")} == {
        "from_state": "closed",
        "to_state": "open",
        "reason": "failure_threshold",
        "failure_count": 3,
        "job_id": "job-2",
    }
    assert set(opened) == {"id", "from_state", "to_state", "failure_count", "reason", "job_id", "actor", "created_at"}
    # A breaker that has counted nothing yet: no row, the same shape.
    assert system_json("breaker", "echo") == {
        "plugin": "echo",
        "command": "poll",
        "state": None,
        "failure_count": 0,
        "opened_at": None,
        "last_failure_at": None,
        "last_job_id": None,
        "updated_at": None,
        "transitions": [],
    }
    code, text, _ = system("breaker", "stress")
    assert code == 0 and text.splitlines()[:2] == ["Circuit breaker for stress (poll)", "State: open (failure_count=3)"]
    assert "Transitions:" in text and "closed -> open reason=failure_threshold failure_count=3 job=job-2" in text
    assert [b["command"] for b in system_json("breaker")["breakers"]] == ["poll"]  # every breaker


@pytest.mark.process
def test_an_entry_without_timezone_reads_the_hosts_clock_and_an_explicit_one_wins(cfg):
    """Item 103: the default was UTC; the original (and 000's runbook) use the host's local time."""
    cfg.plugins["stress"]["schedules"] = [
        {"id": "local", "cron": "0 7 * * *"},
        {"id": "utc", "cron": "0 7 * * *", "timezone": "UTC"},
        {"id": "go-local", "cron": "0 7 * * *", "timezone": "Local"},  # Go's name for the host's zone
    ]
    cfg.write()
    code, view = ductile_json(cfg, "system", "scheduler", TZ="Australia/Sydney")
    assert code == 0, view
    entries = {e["schedule_id"]: e for e in view["entries"]}
    assert (entries["local"]["timezone"], entries["utc"]["timezone"]) == ("Australia/Sydney", "UTC")
    assert entries["go-local"]["timezone"] == "Australia/Sydney"
    local = datetime.fromisoformat(entries["local"]["next_run_at"]).astimezone(ZoneInfo("Australia/Sydney"))
    assert (local.hour, local.minute) == (7, 0)  # 07:00 on the host's clock, 20:00Z or 21:00Z
    explicit = datetime.fromisoformat(entries["utc"]["next_run_at"])
    assert (explicit.hour, explicit.minute, explicit.utcoffset()) == (7, 0, timedelta(0))
