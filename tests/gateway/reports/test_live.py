"""The live figures (gateway/reports/live.py, gateway/reports/runs.py): one snapshot built from a real ledger of
real plugin runs, for the dashboard, `system watch` and `GET /system/watch`. What it counts is
what the ledger holds; it moves when the ledger moves and not otherwise; pipeline runs are found
as they start and their status follows their jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from gateway.execution.dispatch import Executor
from gateway.intake.events import publish_event
from gateway.reports.live import WINDOW_MINUTES, LedgerClock, LiveFigures, build_snapshot, change_marker, window_start
from gateway.reports.runs import RecentRuns, run_steps
from ledger.models import Job, JobSpec
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.jobs import run_until_idle
from tests.support.runtime import load_runtime
from tests.support.waiting import wait_for

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_live_state"),
]

PIPELINE = {
    "name": "greet",
    "on": "greet.start",
    "steps": [
        {"id": "hello", "uses": "echo"},
        {"id": "look", "uses": "probe", "if": {"path": "payload.go", "op": "eq", "value": True}},
    ],
}


@pytest.fixture
def holder(config_dir):
    config_dir.extra["pipelines"] = [PIPELINE]
    config_dir.extra["api"] = {
        "auth": {
            "tokens": [
                {"name": "reader", "token": "tok-reader", "scopes": ["jobs:ro"]},
                {"name": "plugins", "token": "tok-plugins", "scopes": ["plugin:ro"]},
            ]
        }
    }
    return load_runtime(config_dir)


def enqueue(plugin: str, **payload) -> str:
    spec = JobSpec(plugin=plugin, command="poll", submitter=Submitter.CLI, payload=payload, max_attempts=1)
    return Job.objects.enqueue(spec, default_dedupe_ttl=60).job_id


def start_pipeline(holder, go: bool) -> str:
    (job_id,) = publish_event(holder.get(), "greet.start", {"go": go}, submitter=Submitter.CLI)
    return job_id


def test_the_snapshot_counts_what_the_ledger_holds(holder):
    ok = [enqueue("echo"), enqueue("echo")]
    broken = enqueue("stress", mode="error")
    run_until_idle(holder)
    waiting = enqueue("py-greet")
    running = Job.objects.claim_next(worker_id="w9", caps={"py-greet": 1}, lease_ttl=60)  # claimed, not run
    assert running is not None and running.id == waiting
    queued = enqueue("echo")

    snap = build_snapshot(holder.get())

    # The failure was retryable with one attempt allowed: it rests dead.
    assert snap["queue"] == {"queued": 1, "running": 1, "succeeded": 2, "failed": 0, "timed_out": 0, "dead": 1}
    assert snap["queue_depth"] == 2  # queued and running, as /healthz counts (issue 35 re-audit, N4)
    assert [job["job_id"] for job in snap["running"]] == [waiting]
    assert snap["running"][0]["claimed_by"] == "w9" and snap["running"][0]["elapsed_seconds"] >= 0
    # Three jobs ended in the current minute, one of them failed.
    t = snap["throughput"]
    assert len(t["finished"]) == len(t["failed"]) == WINDOW_MINUTES
    assert t["finished"][-1] == 3 and t["failed"][-1] == 1
    assert (t["finished_last_hour"], t["failed_last_hour"], t["failure_rate"]) == (3, 1, round(1 / 3, 4))
    # The plugin's own time, nearest-rank over its runs of the hour.
    latency = {p["plugin"]: p for p in snap["latency"]["plugins"]}
    assert set(latency) == {"echo", "stress"}
    echo = latency["echo"]["plugin_time_ns"]
    assert latency["echo"]["count"] == 2 and 0 < echo["p50"] <= echo["p95"] <= echo["p99"] == echo["max"]
    (failure,) = snap["failures"]
    assert failure["job_id"] == broken and failure["status"] == JobStatus.DEAD
    assert "simulated failure" in failure["last_error"]
    assert {e["job_id"] for e in snap["recent_events"]} == {*ok, broken}
    assert all("payload" not in e for e in snap["recent_events"])
    assert snap["gateway"]["plugins_loaded"] == len(holder.get().registry.instances)
    assert queued not in {j["job_id"] for j in snap["running"]}


def test_jobs_count_in_the_minute_they_ended_within_the_hour(holder):
    ids = [enqueue("echo") for _ in range(3)]
    run_until_idle(holder)
    now = timezone.now()
    start = window_start(now)
    # One ended 30 minutes into the window, one before it: moved back in time in the ledger.
    Job.objects.filter(pk=ids[0]).update(completed_at=start + timedelta(minutes=30, seconds=5))
    Job.objects.filter(pk=ids[1]).update(completed_at=start - timedelta(seconds=1))
    t = build_snapshot(holder.get(), now)["throughput"]
    assert t["finished"][30] == 1 and t["finished"][-1] == 1 and sum(t["finished"]) == 2
    assert t["start"] == start.isoformat().replace("+00:00", "Z")


def test_breakers_and_schedules_are_listed(holder):
    from ledger.models import CircuitBreaker, ScheduleEntry

    now = timezone.now()
    CircuitBreaker.objects.create(plugin="stress", command="poll", state="open", failure_count=3, opened_at=now)
    ScheduleEntry.objects.create(
        plugin="echo", schedule_id="soon", command="poll", next_run_at=now + timedelta(seconds=5)
    )
    ScheduleEntry.objects.create(
        plugin="echo", schedule_id="later", command="poll", next_run_at=now + timedelta(hours=1)
    )
    ScheduleEntry.objects.create(
        plugin="echo", schedule_id="paused", command="poll", status="paused_manual", next_run_at=now
    )
    snap = build_snapshot(holder.get())
    assert [(b["plugin"], b["state"], b["failure_count"]) for b in snap["breakers"]] == [("stress", "open", 3)]
    assert [s["schedule_id"] for s in snap["schedules"]] == ["soon", "later"]  # active ones, soonest first


def test_the_marker_moves_with_the_ledger_and_only_then(holder):
    still = change_marker()
    assert change_marker() == still
    job = enqueue("echo")
    enqueued = change_marker()
    assert enqueued != still
    claimed = Job.objects.claim_next(worker_id="w1", caps={"echo": 1}, lease_ttl=60)
    assert claimed is not None and claimed.id == job
    assert change_marker() != enqueued  # a claim appends a transition
    Executor(holder, "w1").execute(claimed)
    finished = change_marker()
    assert finished != enqueued
    assert change_marker() == finished


def test_the_clock_and_the_figures_are_rebuilt_only_when_the_ledger_moved(holder):
    clock = LedgerClock(min_interval=0.0, refresh=3600)
    figures = LiveFigures(clock)
    first = figures.get(holder.get())
    assert figures.get(holder.get()) is first  # nothing moved: the same snapshot, not rebuilt
    enqueue("echo")
    second = figures.get(holder.get())
    assert second is not first and second["queue"]["queued"] == first["queue"]["queued"] + 1
    # Asked again within min_interval, the marker is not even read: the ledger may move meanwhile.
    throttled = LedgerClock(min_interval=3600, refresh=3600)
    generation = throttled.tick()
    enqueue("echo")
    assert throttled.tick() == generation


def test_runs_are_found_as_they_start_and_follow_their_jobs(holder):
    runs = RecentRuns(keep=2)
    assert runs.latest() == {}
    first = start_pipeline(holder, go=True)
    (run,) = runs.latest()["greet"]
    assert (run.job_id, run.status, run.final) == (first, JobStatus.QUEUED, False)
    run_until_idle(holder)
    (run,) = runs.latest()["greet"]
    assert (run.status, run.final) == (JobStatus.SUCCEEDED, True) and run.finished_at is not None
    second = start_pipeline(holder, go=False)
    third = start_pipeline(holder, go=True)
    assert [r.job_id for r in runs.latest()["greet"]] == [third, second]  # newest first, `keep` of them
    # A process that starts later finds the same runs with one scan.
    assert [r.job_id for r in RecentRuns(keep=2).latest()["greet"]] == [third, second]
    # Jobs not started by a pipeline are not runs.
    enqueue("echo")
    assert [r.job_id for r in runs.latest()["greet"]] == [third, second]


def test_a_run_fails_as_soon_as_one_of_its_jobs_failed(holder, config_dir):
    config_dir.extra["pipelines"] = [
        {
            "name": "fragile",
            "on": "fragile.start",
            "steps": [{"id": "boom", "uses": "stress"}, {"id": "z", "uses": "probe"}],
        }
    ]
    holder = load_runtime(config_dir)
    runs = RecentRuns()
    (job_id,) = publish_event(holder.get(), "fragile.start", {"mode": "error"}, submitter=Submitter.CLI)
    run_until_idle(holder)
    (run,) = runs.latest()["fragile"]
    assert (run.status, run.final) == ("failed", True)
    steps = run_steps(job_id)
    assert steps is not None and steps["status"] == "failed"
    assert steps["steps"]["boom"]["status"] == JobStatus.DEAD and "z" not in steps["steps"]


def test_run_steps_maps_every_step_to_its_job(holder):
    job_id = start_pipeline(holder, go=True)
    run_until_idle(holder)
    steps = run_steps(job_id)
    assert steps is not None
    assert steps["pipeline"] == "greet" and steps["status"] == JobStatus.SUCCEEDED
    by_step = steps["steps"]
    assert set(by_step) == {"hello", "look__switch", "look"}
    assert by_step["look__switch"]["plugin"] == "core.switch"
    assert all(s["status"] == JobStatus.SUCCEEDED and s["attempt"] == 1 for s in by_step.values())
    # A step's own job is not the root of a run; an unknown id neither.
    assert run_steps(by_step["look"]["job_id"]) is None
    assert run_steps("no-such-job") is None
    skipped = start_pipeline(holder, go=False)
    run_until_idle(holder)
    gated = run_steps(skipped)
    assert gated is not None and set(gated["steps"]) == {"hello", "look__switch"}  # the gate said no


def test_the_snapshot_shows_each_pipelines_last_run(holder):
    snap = build_snapshot(holder.get())
    assert snap["pipelines"] == [{"name": "greet", "trigger": "greet.start", "steps": 3, "last_run": None}]
    job_id = start_pipeline(holder, go=True)
    run_until_idle(holder)
    (entry,) = build_snapshot(holder.get())["pipelines"]
    assert entry["last_run"]["job_id"] == job_id and entry["last_run"]["status"] == JobStatus.SUCCEEDED


def test_the_api_serves_the_snapshot_to_jobs_ro(holder):
    enqueue("echo")
    run_until_idle(holder)
    client = APIClient()
    assert client.get("/system/watch").status_code == 401
    denied = client.get("/system/watch", HTTP_AUTHORIZATION="Bearer tok-plugins")
    assert denied.status_code == 403 and "jobs:ro" in denied.json()["error"]
    answer = client.get("/system/watch", HTTP_AUTHORIZATION="Bearer tok-reader")
    assert answer.status_code == 200
    body = answer.json()
    assert body["queue"]["succeeded"] == 1 and body["throughput"]["finished"][-1] == 1
    assert {"running", "latency", "breakers", "schedules", "failures", "pipelines", "recent_events"} <= set(body)
    # Asked again with its ETag: 304 and no body while the ledger stands still, the new figures after.
    etag = answer["ETag"]
    same = client.get("/system/watch", HTTP_AUTHORIZATION="Bearer tok-reader", HTTP_IF_NONE_MATCH=etag)
    assert same.status_code == 304 and same.content == b"" and same["ETag"] == etag
    enqueue("echo")

    def moved():
        again = client.get("/system/watch", HTTP_AUTHORIZATION="Bearer tok-reader", HTTP_IF_NONE_MATCH=etag)
        return again if again.status_code == 200 else None

    again = wait_for(moved, 5, what="the figures to move")  # the clock reads the ledger twice a second
    assert again["ETag"] != etag and again.json()["queue"]["queued"] == 1


def test_the_marker_is_one_cheap_statement(holder):
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        change_marker()
    assert len(queries) == 1
