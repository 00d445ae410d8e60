"""The demo fails on purpose (issue 36: "the demo never fails"), driven in-process on a
copy of fixtures/demo with real plugin processes: scripts/demo_setup.py's first wave, the
scheduler's ticks and the workers' loop. Within the demo's first minutes the ledger holds a flaky
plugin's retry that succeeds, a job dead after its attempts (whose end starts the on-hook
pipeline), a scheduled poll whose breaker opens and half-opens (the `scheduler.*` events), and the
pipeline's `if:` switch taken one way for ada and the other for guest. Then a person sees them
in Chromium: the dashboard's failures and breakers, the dead job's stderr and its Retry, the
breaker's history, the flaky job's retry; screenshots saved to be looked at.

Retries wait their real backoff (about a second: the demo's backoff_base). The breaker's 30 s
cooldown is not waited for: the scheduler's clock jumps to the broken poll's next due run, as its
sleep would end (so the scheduler's times run ahead of the workers')."""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from dotenv import dotenv_values

from tests.support.browser import served_in_process
from tests.support.checkout import REPO
from tests.support.console_setup import console_roles
from tests.support.jobs import run_until_idle
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DEMO = REPO / "fixtures" / "demo"
SETTINGS = {k: v for k, v in dotenv_values(DEMO / ".env").items() if v is not None}


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def real_now() -> datetime:
    return datetime.now(UTC)


def demo_setup() -> None:
    """What scripts/demo_setup.py does after migrating and sealing: the console's accounts and the
    first wave of jobs (a script, not a module of the project: loaded from its file)."""
    spec = importlib.util.spec_from_file_location("demo_setup", REPO / "scripts" / "demo_setup.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    console_roles()  # what the demo's `ductile migrate` made, before a flush emptied it
    module.accounts()
    module.first_wave(io.StringIO())


@pytest.fixture
def demo(tmp_path, monkeypatch, fresh_live_state) -> Iterator[None]:
    """The demo's config as the process runtime, its .env under the environment as scripts/demo
    sets it. The config is copied into a checkout's layout in a scratch directory (fixtures/demo
    beside plugins/, a link to the bundled ones), where plugins run, so its relative paths (the
    state directory .demo/, where the flaky plugin also counts its calls) are the scratch's."""
    from gateway.runtime import RUNTIME

    config = tmp_path / "fixtures" / "demo"
    shutil.copytree(DEMO, config, ignore=shutil.ignore_patterns(".checksums"))
    (tmp_path / "plugins").symlink_to(REPO / "plugins")
    monkeypatch.chdir(tmp_path)
    for key, value in SETTINGS.items():
        if key not in os.environ:
            monkeypatch.setenv(key, value)
    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    RUNTIME.load(config, os.environ)
    if RUNTIME.error:
        raise RUNTIME.error
    try:
        yield
    finally:
        RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous


@pytest.fixture
def served(transactional_db) -> Iterator[str]:
    """The gateway's WSGI application on a thread, over this test's ledger, its static files
    served as the gateway serves them (tests.support.browser.served_in_process)."""
    from gateway.http import eventstream

    with served_in_process() as base:
        yield base
        # The dashboard's streams end before the server and the demo's runtime go.
        eventstream.stop_streams()
        wait_for(lambda: eventstream.BELL.subscribers == 0, timeout=10, what="the pages' streams to end")
        eventstream.STOPPING.clear()


def events(kind: str, **payload: str) -> list:
    from ledger.models import EventRecord

    rows = EventRecord.objects.filter(type=kind).order_by("id")
    return [e for e in rows if all(e.payload.get(k) == v for k, v in payload.items())]


def jobs(plugin: str, **filters: object) -> list:
    from ledger.models import Job

    return list(Job.objects.filter(plugin=plugin, **filters).order_by("created_at"))


def breaker_of_a_demo_start() -> dict[str, float]:
    """The demo's first minutes: scripts/demo_setup.py's first wave, every new schedule entry
    fired at once, all run to its end (the retries after their real backoff); then the ticks of
    the broken poll until its breaker half-opens. Returns the demo time (seconds since the start)
    at which each breaker change was announced."""
    from gateway.daemon.scheduler import Scheduler
    from gateway.runtime import RUNTIME
    from ledger.models import Job, ScheduleEntry
    from ledger.states import JobStatus

    started = real_now()
    demo_setup()
    clock = Clock(started)
    loop = Scheduler(RUNTIME, clock=clock, install_signals=False)
    loop.start(started)
    loop.tick(started)

    def idle() -> bool:
        run_until_idle(RUNTIME)
        return not Job.objects.filter(status=JobStatus.QUEUED).exists()

    wait_for(idle, timeout=60, interval=0.2, what="the first wave and its retries to end")
    # The scheduler's time from here: each tick at the broken poll's next due run (its sleep
    # skipped), every job run to its end.
    seen: dict[str, float] = {}
    now = real_now()
    while "half_open" not in seen:
        assert now - started < timedelta(minutes=3), f"no half-open breaker 3 minutes in: {seen}"
        clock.now = now
        loop.tick(now)
        run_until_idle(RUNTIME)
        for name, kind in (("open", "scheduler.circuit_state_changed"), ("half_open", "scheduler.circuit_half_open")):
            if name not in seen and events(kind, plugin="status_feed"):
                seen[name] = (now - started).total_seconds()
        due = ScheduleEntry.objects.get(plugin="status_feed").next_run_at
        assert due is not None
        now = max(due, now + timedelta(seconds=1))
    return seen


def test_the_demo_shows_retries_a_dead_job_a_breaker_a_switch_and_a_hook(demo, served, browser):
    from ledger.models import CircuitBreakerTransition, JobLog
    from ledger.states import JobStatus

    began = time.monotonic()
    seen = breaker_of_a_demo_start()
    print(f"breaker changes announced at (s, demo time): {seen}; driven in {time.monotonic() - began:.1f}s")

    # A plugin that fails now and then: its first call fails, is retried a second or two later,
    # and succeeds.
    (flaky, *_) = jobs("inventory_sync")
    assert flaky.status == JobStatus.SUCCEEDED and flaky.attempt == 2
    (retry,) = events("job.retry_scheduled", job_id=flaky.id)
    assert retry.payload["next_attempt"] == 2 and "503" in retry.payload["error"]
    assert 1000 <= retry.payload["backoff_ms"] < 2000  # backoff_base 1s: 1 s plus up to 1 s of jitter

    # One that fails for good: dead after its 3 attempts, each with the crash on stderr.
    (export,) = jobs("nightly_export", command="poll")
    assert (export.status, export.attempt, export.max_attempts) == (JobStatus.DEAD, 3, 3)
    attempts = JobLog.objects.filter(job_id=export.id).order_by("attempt")
    assert [a.status for a in attempts] == [JobStatus.FAILED] * 3
    assert all("boom: simulated crash" in (a.stderr or "") for a in attempts)
    assert export.can_retry
    # Dead within seconds of its start: its backoffs are 1-2 s and 2-3 s.
    (death,) = events("job.dead", job_id=export.id)
    assert death.created_at - export.created_at < timedelta(seconds=15)
    # Its death starts the on-hook pipeline, as a fresh root under the dead job.
    (page,) = jobs("pager")
    assert page.parent_job_id == export.id and page.status == JobStatus.SUCCEEDED
    assert "PAGE on-call: Job dead [nightly_export]" in (JobLog.objects.get(job_id=page.id).result or "")

    # The pipeline's `if:` switch: ada's run reaches the report, guest's does not.
    reports = [j.payload["user"] for j in jobs("uptime", parent_job_id__isnull=False)]
    assert reports == ["ada"]
    assert len(events("ductile.switch.true")) == 1 and len(events("ductile.switch.false")) == 1

    # The broken scheduled poll: its breaker opened after 3 failures and half-opened after the
    # cooldown; the probe failed and opened it again.
    # (As a set: the half-open change is stamped with the scheduler's time, which ran ahead.)
    changes = {
        (t.from_state, t.to_state, t.reason) for t in CircuitBreakerTransition.objects.filter(plugin="status_feed")
    }
    assert changes == {
        ("closed", "open", "failure_threshold"),
        ("open", "half_open", "cooldown_elapsed"),
        ("half_open", "open", "failure_threshold"),
    }
    assert seen["open"] < 60 and seen["half_open"] < 120

    # What a person sees. The operator (who may act) logs in from the demo's .env.
    browser.base = served
    browser.log_in(SETTINGS["DUCTILE_DEMO_OPERATOR"], SETTINGS["DUCTILE_DEMO_OPERATOR_PASSWORD"])
    wait_for(lambda: browser.find_all("#user-tools"), 20, what="the login")
    browser.open("/dashboard/")
    wait_for(lambda: browser.find_all(f"#failures-table tr[data-job='{export.id}']"), 20, what="the dead job")
    assert "nightly_export" in browser.find(f"#failures-table tr[data-job='{export.id}']").text
    breakers = browser.find("#breakers-table").text
    assert "status_feed" in breakers and "open" in breakers
    browser.screenshot("demo-dashboard", full=True)

    # The flaky plugin's job: its first attempt failed, the retry was scheduled and succeeded.
    browser.open(f"/admin/ledger/job/{flaky.id}/change/")
    assert "job.retry_scheduled" in browser.find("#events").text
    assert "inventory API answered 503" in browser.text
    browser.screenshot("demo-flaky-job", full=True)

    browser.open("/admin/ledger/job/?status=dead")
    assert "nightly_export" in browser.text
    browser.screenshot("demo-dead-jobs")
    browser.open(f"/admin/ledger/job/{export.id}/change/")
    assert "boom: simulated crash" in browser.find(".ductile-stderr").text
    assert "pager" in browser.text  # the hook's job, in the dead job's tree
    browser.screenshot("demo-dead-job", full=True)
    browser.follow(browser.find("a.ductile-action[href$='/act/retry/']"))
    assert "Retry now: are you sure?" in browser.find("#content h1").text
    browser.follow(browser.find(".ductile-confirm-row input[type=submit]"))
    assert "queued again for attempt 4/4" in browser.find(".messagelist").text
    export.refresh_from_db()
    assert (export.status, export.attempt) == (JobStatus.QUEUED, 4)
    browser.screenshot("demo-retried")

    # The pipeline's latest run (guest's): its switch said no, so the report was never reached.
    browser.open("/dashboard/pipelines/")
    wait_for(lambda: browser.driver.execute_script("return window.ductilePipelines.ready"), 20, what="mermaid")
    card = "section[data-pipeline='greet-and-report']"

    def status(step: str) -> str:
        return browser.find(f"{card} g.node[data-step='{step}']").get_attribute("data-status")

    wait_for(lambda: status("report__switch") == "succeeded", 10, what="the latest run's steps")
    assert status("report") == "none" and status("shout") == "succeeded"
    assert "not reached" in browser.find(f"{card} table.dash-steps tr[data-step='report']").text
    browser.screenshot("demo-pipelines", full=True)

    browser.open("/admin/ledger/circuitbreaker/?state=tripped")
    (tripped,) = browser.find_all("#result_list tbody tr th a")
    assert "status_feed" in tripped.text
    browser.follow(tripped)
    assert "cooldown_elapsed" in browser.text and "failure_threshold" in browser.text
    browser.screenshot("demo-breaker", full=True)
