"""The events of how an attempt ends, beyond a plugin's own: `job.retry_scheduled`,
`job.retry_exhausted` and `job.dead`, `poll.started`/`poll.completed` around a scheduled poll.
Each is in `event_log` and starts the pipelines that listen for it (issue 35 items 16, 20, 38,
new-12), with real plugin processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.utils import timezone

from gateway import intake
from ledger.models import EventRecord, Job, JobLog, JobSpec
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.jobs import jobs_by_step, run_until_idle
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def listener(name, **source):
    return {"name": name, **source, "steps": [{"id": "heard", "uses": "probe"}]}


def heard(pipeline):
    """The event payload the listening pipeline's step was started with."""
    job = jobs_by_step(pipeline)["heard"]
    result = JobLog.objects.filter(job_id=job.id).latest("completed_at").result
    assert result is not None
    return json.loads(result)["result"]["request"]["event"]["payload"]


def events_of(job_id):
    return list(EventRecord.objects.filter(job_id=job_id).order_by("id"))


def test_a_retried_failure_announces_its_retry_and_the_last_one_ends_dead_with_why(config_dir):
    config_dir.plugins["stress"]["notify_on_complete"] = True
    config_dir.extra["pipelines"] = [
        listener("on-retry", on="job.retry_scheduled"),
        listener("on-exhausted", on="job.retry_exhausted"),
        listener("on-dead", **{"on-hook": "job.dead"}),
    ]
    holder = load_runtime(config_dir)
    failing = Job.objects.enqueue(
        JobSpec("stress", "poll", Submitter.CLI, payload={"mode": "error"}, max_attempts=2), default_dedupe_ttl=60
    ).job_id
    run_until_idle(holder)

    job = Job.objects.get(pk=failing)
    assert (job.status, job.attempt) == (JobStatus.QUEUED, 2)
    (scheduled,) = EventRecord.objects.filter(type="job.retry_scheduled")
    assert scheduled.job_id == failing and scheduled.source == "stress"
    payload = scheduled.payload
    assert payload["job_id"] == failing and (payload["plugin"], payload["command"]) == ("stress", "poll")
    assert (payload["attempt"], payload["next_attempt"], payload["max_attempts"]) == (1, 2, 2)
    assert payload["error"] == "simulated failure" and payload["reason"] == "plugin_error"
    assert job.next_retry_at is not None
    assert payload["next_retry_at"] == job.next_retry_at.isoformat().replace("+00:00", "Z")
    assert 30_000 <= payload["backoff_ms"] <= 60_000  # base 30s * 2^0 + random(0, base)
    assert heard("on-retry")["next_retry_at"] == payload["next_retry_at"]
    # A retry is not the step's result: the failing job's own tree holds only the listener.
    assert [j.plugin for j in Job.objects.filter(parent_job_id=failing)] == ["probe"]

    Job.objects.filter(pk=failing).update(next_retry_at=timezone.now() - timedelta(seconds=1))
    run_until_idle(holder)
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD and job.attempt == 2
    (exhausted,) = EventRecord.objects.filter(type="job.retry_exhausted")
    assert exhausted.payload["reason"] == "attempts_exhausted" and exhausted.payload["attempts"] == 2
    assert exhausted.payload["final_error"] == "simulated failure"
    assert heard("on-exhausted")["reason"] == "attempts_exhausted"
    (dead,) = EventRecord.objects.filter(type="job.dead")
    assert dead.job_id == failing
    assert dead.payload["status"] == "dead" and dead.payload["reason"] == "attempts_exhausted"
    assert dead.payload["message"] == "Job dead [stress]: simulated failure" == dead.payload["text"]
    told = heard("on-dead")
    assert told["job_id"] == failing and told["error"] == "simulated failure" and told["max_attempts"] == 2
    assert EventRecord.objects.filter(type="job.retry_scheduled").count() == 1  # none for the last attempt


def test_job_dead_is_logged_without_any_hook(config_dir):
    """003 §9: a job that becomes dead emits `job.dead`; before, nothing did."""
    holder = load_runtime(config_dir)
    failing = Job.objects.enqueue(
        JobSpec("stress", "poll", Submitter.CLI, payload={"mode": "error"}, max_attempts=1), default_dedupe_ttl=60
    ).job_id
    run_until_idle(holder)
    assert Job.objects.get(pk=failing).status == JobStatus.DEAD
    types = [e.type for e in events_of(failing)]
    assert types == ["job.preflight", "job.retry_exhausted", "job.dead"]


def test_a_scheduled_poll_is_told_between_poll_started_and_poll_completed(config_dir):
    config_dir.extra["pipelines"] = [listener("on-polled", on="poll.completed")]
    holder = load_runtime(config_dir)
    runtime = holder.get()
    spec = intake.scheduled(runtime, "stress", "poll", {"emit": 1}, dedupe_key="stress:poll:hourly", note="t")
    (polled,) = intake.submit_ids(runtime, [spec])
    by_hand = intake.submit_ids(runtime, [intake.job(runtime, Submitter.CLI, "stress", "poll", {})])[0]
    run_until_idle(holder)

    types = [e.type for e in events_of(polled)]
    assert types == ["poll.started", "job.preflight", "stress.event", "poll.completed"]
    started, completed = events_of(polled)[0].payload, events_of(polled)[-1].payload
    assert started["schedule_id"] == "hourly" and started["submitted_by"] == "scheduler"
    assert started["attempt"] == 1 and started["started_at"]
    assert completed["status"] == completed["outcome"] == "succeeded" and completed["duration_ms"] >= 0
    assert heard("on-polled")["job_id"] == polled
    # Only the scheduler's polls: a poll run by hand is not a poll cycle.
    assert not EventRecord.objects.filter(job_id=by_hand, type__startswith="poll.").exists()


def test_a_job_lost_with_its_worker_and_ended_by_recovery_fires_its_hooks_with_recovery_true(config_dir):
    """Item 7: a job whose lease ran out on its last attempt ended `dead` with no signal, so an
    on-hook pipeline never heard of crash-lost jobs."""
    from gateway.execution.workers import WorkerDaemon

    config_dir.plugins["stress"]["notify_on_complete"] = True
    config_dir.extra["pipelines"] = [
        listener("on-failed", **{"on-hook": "job.failed"}),
        listener("on-dead", **{"on-hook": "job.dead"}),
    ]
    holder = load_runtime(config_dir)
    lost = Job.objects.enqueue(JobSpec("stress", "poll", Submitter.CLI, max_attempts=1), default_dedupe_ttl=60).job_id
    claimed = Job.objects.claim_next(worker_id="elsewhere:1:gone", caps={"stress": 1}, lease_ttl=60)
    assert claimed is not None and claimed.id == lost
    Job.objects.filter(pk=lost).update(lease_until=timezone.now() - timedelta(seconds=1))

    WorkerDaemon(holder, threads=1, once=True, install_signals=False)._recover()
    job = Job.objects.get(pk=lost)
    assert job.status == JobStatus.DEAD and "lease of worker elsewhere:1:gone expired" in (job.last_error or "")
    signals = {e.type: e.payload for e in events_of(lost)}
    assert set(signals) == {"job.completed", "job.failed", "job.dead"}
    assert all(p["recovery"] is True and p["status"] == "dead" for p in signals.values())
    run_until_idle(holder)
    for pipeline in ("on-failed", "on-dead"):
        told = heard(pipeline)
        assert told["job_id"] == lost and told["recovery"] is True and "expired" in told["error"]


@contextmanager
def refusing_succeeded_logs_of(plugin: str) -> Iterator[None]:
    """A real fault in the database: a trigger that refuses to record `plugin`'s successful
    attempts, so recording the outcome raises inside the executor. Dropped after: a trigger is
    schema, which the flush between tests leaves in place."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION refuse_log() RETURNS trigger AS $$ BEGIN "
                f"IF NEW.status = 'succeeded' AND NEW.plugin = '{plugin}' THEN RAISE EXCEPTION 'refused'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                "CREATE TRIGGER refuse_log BEFORE INSERT ON job_log FOR EACH ROW EXECUTE FUNCTION refuse_log()"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER refuse_log BEFORE INSERT ON job_log "
                f"WHEN NEW.status = 'succeeded' AND NEW.plugin = '{plugin}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("DROP TRIGGER refuse_log ON job_log")
                cursor.execute("DROP FUNCTION refuse_log()")
            else:
                cursor.execute("DROP TRIGGER refuse_log")


def test_an_attempt_ended_by_an_internal_error_announces_its_retry_and_its_dead_end(config_dir):
    # Before: the internal-error path recorded the failed attempt with no job.retry_scheduled,
    # no job.retry_exhausted and no job.dead, so a listener never heard of such a job's end.
    config_dir.extra["pipelines"] = [listener("on-exhausted", on="job.retry_exhausted")]
    holder = load_runtime(config_dir)
    with refusing_succeeded_logs_of("echo"):
        spec = JobSpec("echo", "poll", Submitter.CLI, max_attempts=2)
        job_id = Job.objects.enqueue(spec, default_dedupe_ttl=60).job_id
        run_until_idle(holder)
        Job.objects.filter(pk=job_id).update(next_retry_at=timezone.now() - timedelta(seconds=1))
        run_until_idle(holder)

        job = Job.objects.get(pk=job_id)
        assert job.status == JobStatus.DEAD and (job.last_error or "").startswith("internal error: ")
        assert [e.type for e in events_of(job_id)] == ["job.retry_scheduled", "job.retry_exhausted", "job.dead"]
        assert heard("on-exhausted")["job_id"] == job_id
