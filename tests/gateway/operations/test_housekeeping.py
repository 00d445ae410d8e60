"""Housekeeping on django-q2: retention pruning in batches (never a queued or running job), the
schedule rows written from the config and `service.backup` validation (the cluster under a real
`system start`: tests/processes/test_housekeeping_cluster.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import Schedule

from gateway.config.errors import ConfigError
from gateway.config.model import load_gateway_config
from gateway.operations.housekeeping import (
    BACKUP_SCHEDULE,
    BATCH_SECONDS,
    PRUNE_SCHEDULE,
    drain,
    prune,
    rotate,
    sync_schedules,
)
from ledger.models import (
    AttemptOutcome,
    CircuitBreaker,
    CircuitBreakerTransition,
    EventRecord,
    Job,
    JobAttempt,
    JobLog,
    JobSpec,
    JobStopwatch,
    JobTransition,
    PluginFact,
    PluginState,
    RelayAcceptance,
    WorkerInstance,
)
from ledger.models.breakers import record_scheduled_outcome
from ledger.models.facts import write_state
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.runtime import installed_runtime

DAY = 86400.0
STOPWATCH = {
    "command": "poll",
    "enter_wall_ns": 1,
    "exit_wall_ns": 2,
    "dur_ns": 1,
    "runtime_pre_ns": 0,
    "status": "ok",
    "subs_json": [],
    "runtime_post_ns": 0,
}


def finished_job(at, *, status=JobStatus.SUCCEEDED, plugin="echo"):
    """A job enqueued, claimed and finished at `at`, through the queue's own methods: its
    job_queue, job_transitions, job_log, job_stopwatch and event_log rows all carry that time."""
    job_id = Job.objects.enqueue(JobSpec(plugin, "poll", Submitter.CLI), default_dedupe_ttl=DAY, now=at).job_id
    job = Job.objects.claim_next(worker_id="w1", caps={plugin: 1}, lease_ttl=60, now=at, only=job_id)
    assert job is not None
    outcome = AttemptOutcome(
        status=status, retryable=False, stopwatch=dict(STOPWATCH), events=[{"type": "echo.poll", "payload": {}}]
    )
    job.record_outcome(outcome, worker="w1", default_dedupe_ttl=DAY, now=at)
    return job_id


def relay_acceptance(signature: str, *, expires_at):
    """A relayed delivery accepted through the ledger's own method, answered until `expires_at`."""
    delivery = RelayAcceptance.of(
        peer="home-primary",
        signature=signature,
        event_type="backup.ready",
        dedupe_key=None,
        receiver_event_id=signature[:36],
        accepted_at=timezone.now(),
        expires_at=expires_at,
    )
    accepted, duplicate = RelayAcceptance.objects.admit(delivery, lambda: None)
    assert not duplicate
    return accepted.receiver_event_id


@pytest.mark.postgres
@pytest.mark.django_db
class TestRetention:
    def test_prune_deletes_what_retention_no_longer_keeps_and_nothing_else(self):
        now = timezone.now()
        old_done = [finished_job(now - timedelta(days=2)), finished_job(now - timedelta(days=2), status="failed")]
        ancient = finished_job(now - timedelta(days=40))
        recent = finished_job(now - timedelta(hours=1))
        # Waiting and running jobs are never pruned, however old, nor is any of their history.
        waiting = Job.objects.enqueue(
            JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=DAY, now=now - timedelta(days=40)
        )
        running = Job.objects.enqueue(
            JobSpec("stress", "poll", Submitter.CLI), default_dedupe_ttl=DAY, now=now - timedelta(days=40)
        )
        assert Job.objects.claim_next(worker_id="w2", caps={"stress": 1}, lease_ttl=60, now=now - timedelta(days=40))
        # A relay acceptance lives as long as its own window, whatever the retention settings.
        relay_acceptance("a" * 64, expires_at=now - timedelta(seconds=1))
        answering = relay_acceptance("b" * 64, expires_at=now + timedelta(minutes=5))
        # Nodes: one silent for 40 days (its host gone, its row still `running`) and one stopped
        # 40 days ago leave; one stopped yesterday and a live one stay.
        for node, heard, stopped in (
            ("gone", 40, False),
            ("old", 40, True),
            ("yesterday", 1, True),
            ("live", 0, False),
        ):
            row = WorkerInstance.objects.register(node, hostname="vm", pid=1, threads=1, plugins="")
            if stopped:
                row.stop(now - timedelta(days=heard))
            WorkerInstance.objects.filter(pk=node).update(heartbeat_at=now - timedelta(days=heard))

        deleted = prune(job_queue_retention=DAY, job_log_retention=30 * DAY)

        assert deleted == {
            "job_queue": 3,
            "job_log": 1,
            "job_attempts": 1,
            "egress_hosts": 0,
            "job_transitions": 3,
            "job_stopwatch": 1,
            "event_log": 1,
            "config_snapshots": 0,
            "plugin_facts": 0,
            "circuit_breaker_transitions": 0,
            "relay_acceptances": 1,
            "worker_instances": 2,
            "axes_accesslog": 0,
            "axes_accessfailurelog": 0,
            "axes_accessattempt": 0,
        }
        assert set(WorkerInstance.objects.values_list("id", flat=True)) == {"yesterday", "live"}
        assert list(RelayAcceptance.objects.values_list("receiver_event_id", flat=True)) == [answering]
        assert set(Job.objects.values_list("id", flat=True)) == {recent, waiting.job_id, running.job_id}
        # job_log, stopwatch and events live for job_log_retention: the 2-day-old attempts stay.
        assert set(JobLog.objects.values_list("job_id", flat=True)) == {*old_done, recent}
        assert set(JobStopwatch.objects.values_list("job_id", flat=True)) == {*old_done, recent}
        assert set(JobAttempt.objects.values_list("job_id", flat=True)) == {*old_done, recent}
        assert set(EventRecord.objects.values_list("job_id", flat=True)) == {*old_done, recent}
        kept = set(JobTransition.objects.values_list("job_id", flat=True))
        assert ancient not in kept and {*old_done, recent, waiting.job_id, running.job_id} <= kept
        assert JobTransition.objects.filter(job_id=running.job_id).count() == 2  # queued, then running

    def test_facts_breaker_history_and_login_records_leave_too_each_plugins_newest_fact_stays(self):
        """Before: plugin_facts (a row per poll of a plugin with fact_outputs), the breakers'
        transitions and the console's login records were never pruned and grew for ever."""
        now = timezone.now()
        for plugin, ages in (("watcher", (50, 45, 40)), ("quiet", (60,)), ("fresh", (40, 1))):
            for days in ages:
                write_state(
                    plugin,
                    f"{plugin}.snapshot",
                    {"age": days},
                    job_id="j",
                    command="poll",
                    now=now - timedelta(days=days),
                )
        for days, announced in ((100, True), (95, False), (10, True)):
            at = now - timedelta(days=days)  # the breaker opens and is reset: two transitions
            record_scheduled_outcome("echo", "poll", "j", succeeded=False, threshold=1, now=at)
            CircuitBreaker.objects.get().reset(now=at, by="cli")
            CircuitBreakerTransition.objects.filter(created_at=at).update(announced=announced)
        for days in (40, 1):
            person = {"username": f"ada{days}", "ip_address": "127.0.0.1"}
            records = [
                AccessLog.objects.create(**person),
                AccessFailureLog.objects.create(**person, locked_out=False),
                AccessAttempt.objects.create(**person, failures_since_start=1),
            ]
            for record in records:  # axes stamps them now (auto_now_add)
                type(record).objects.filter(pk=record.pk).update(attempt_time=now - timedelta(days=days))

        deleted = prune(job_queue_retention=DAY, job_log_retention=30 * DAY)

        assert (deleted["plugin_facts"], deleted["circuit_breaker_transitions"]) == (3, 2)
        assert (deleted["axes_accesslog"], deleted["axes_accessfailurelog"], deleted["axes_accessattempt"]) == (1, 1, 1)
        kept = sorted(PluginFact.objects.values_list("plugin_name", "fact_json__age"))
        assert kept == [("fresh", 1), ("quiet", 60), ("watcher", 40)]  # each plugin's newest, however old
        assert PluginState.current("watcher") == {"age": 40}
        # Past 90 days only what was announced leaves; what is still to announce waits for its event.
        history = sorted(((now - t.created_at).days, t.announced) for t in CircuitBreakerTransition.objects.all())
        assert history == [(10, True), (10, True), (95, False), (95, False)]
        assert AccessLog.objects.count() == AccessFailureLog.objects.count() == AccessAttempt.objects.count() == 1

    def test_transitions_and_attempts_keep_their_own_clocks_when_given(self):
        """The original's job_transitions_retention and job_attempts_retention (before: warned as
        ignored); unset, both follow job_log_retention."""
        now = timezone.now()
        job = finished_job(now - timedelta(days=10))
        deleted = prune(job_queue_retention=DAY, job_log_retention=30 * DAY, job_transitions_retention=7 * DAY)
        assert (deleted["job_transitions"], deleted["job_attempts"], deleted["job_log"]) == (3, 0, 0)
        deleted = prune(job_queue_retention=DAY, job_log_retention=30 * DAY, job_attempts_retention=7 * DAY)
        assert (deleted["job_attempts"], deleted["job_log"]) == (1, 0)
        assert JobLog.objects.filter(job_id=job).exists() and not JobAttempt.objects.filter(job_id=job).exists()

    def test_each_batch_deletes_at_most_its_size_in_its_own_transaction(self):
        old = timezone.now() - timedelta(days=3)
        ids = {finished_job(old) for _ in range(5)}
        batches = []
        expired = Job.objects.expired(timezone.now() - timedelta(days=1))
        with CaptureQueriesContext(connection) as queries:
            while count := expired.prune_batch(2):
                batches.append(count)
        assert batches == [2, 2, 1]
        assert sum(q["sql"].startswith('DELETE FROM "job_queue"') for q in queries.captured_queries) == 3
        assert not Job.objects.filter(id__in=ids).exists()

    def test_a_slow_batch_makes_the_next_ones_smaller_and_each_pause_as_long_as_its_batch(self):
        """On a big SQLite ledger a batch of 500 job_queue rows held the one write lock ~150 ms,
        and claims and enqueues waited behind back-to-back batches (p99 1.6 s during a prune).
        Here the first batch takes 150 ms (a clock that says so): the next are sized to take
        BATCH_SECONDS (50 ms), and every batch is followed by a pause at least as long as it took."""
        old = timezone.now() - timedelta(days=3)
        ids = {finished_job(old) for _ in range(500)}
        expired = Job.objects.expired(timezone.now() - timedelta(days=1))
        sizes: list[int] = []
        pauses: list[float] = []
        now = [0.0]
        prune_batch = expired.prune_batch

        def timed(limit: int) -> int:
            sizes.append(limit)
            now[0] += 0.15 if len(sizes) == 1 else BATCH_SECONDS  # the first batch is slow
            return prune_batch(limit)

        expired.prune_batch = timed  # type: ignore[method-assign]
        assert drain(expired, 300, clock=lambda: now[0], sleep=pauses.append) == 500
        assert sizes == [300, 100, 100, 100], sizes  # 300 x 0.05 / 0.15, then as long as BATCH_SECONDS
        assert pauses[0] >= 0.15 and all(p >= BATCH_SECONDS - 1e-9 for p in pauses), pauses
        assert not Job.objects.filter(id__in=ids).exists()

    def test_a_job_taken_back_into_the_queue_is_not_deleted_with_its_batch(self):
        # The delete repeats the expiry conditions: a row that stopped matching is kept.
        job_id = finished_job(timezone.now() - timedelta(days=3), status="failed")
        expired = Job.objects.expired(timezone.now() - timedelta(days=1))
        assert list(expired.values_list("id", flat=True)) == [job_id]
        Job.objects.filter(id=job_id).update(status=JobStatus.QUEUED)
        assert expired.prune_batch(10) == 0
        assert Job.objects.filter(id=job_id).exists()


@pytest.mark.postgres
@pytest.mark.django_db
def test_schedules_follow_the_config_and_an_unchanged_one_keeps_its_next_run(config_dir):
    backups = config_dir.path / "backups"
    config_dir.service["backup"] = {"schedule": "0 3 * * *", "directory": "backups", "keep": 3}
    with installed_runtime(config_dir) as holder:
        assert sync_schedules(holder.get().config) == {PRUNE_SCHEDULE: "created", BACKUP_SCHEDULE: "created"}
    row = Schedule.objects.get(name=BACKUP_SCHEDULE)
    assert (row.schedule_type, row.cron, row.func) == (
        Schedule.CRON,
        "0 3 * * *",
        "gateway.operations.housekeeping.scheduled_backup",
    )
    assert f"'directory': '{backups}'" in row.kwargs and "'keep': 3" in row.kwargs
    assert row.next_run.hour == 3 and row.next_run > timezone.now()
    Schedule.objects.filter(name=PRUNE_SCHEDULE).update(next_run=timezone.now() + timedelta(minutes=30))
    with installed_runtime(config_dir) as holder:
        assert sync_schedules(holder.get().config) == {PRUNE_SCHEDULE: "unchanged", BACKUP_SCHEDULE: "unchanged"}
    assert Schedule.objects.get(name=PRUNE_SCHEDULE).next_run > timezone.now() + timedelta(minutes=29)

    config_dir.service["job_queue_retention"] = "48h"
    config_dir.service["backup"] = {"schedule": "6h", "directory": "backups"}
    with installed_runtime(config_dir) as holder:
        assert sync_schedules(holder.get().config) == {PRUNE_SCHEDULE: "updated", BACKUP_SCHEDULE: "updated"}
    prune_row = Schedule.objects.get(name=PRUNE_SCHEDULE)
    assert "'job_queue_retention': 172800.0" in prune_row.kwargs and prune_row.next_run <= timezone.now()
    row = Schedule.objects.get(name=BACKUP_SCHEDULE)
    assert (row.schedule_type, row.minutes, "'keep': 7" in row.kwargs) == (Schedule.MINUTES, 360, True)

    del config_dir.service["backup"]
    with installed_runtime(config_dir) as holder:
        assert sync_schedules(holder.get().config)[BACKUP_SCHEDULE] == "removed"
    assert not Schedule.objects.filter(name=BACKUP_SCHEDULE).exists()


@pytest.mark.parametrize(
    ("backup", "key", "message"),
    [
        ({"schedule": "every day", "directory": "b"}, "service.backup.schedule", "expected a cron expression"),
        ({"schedule": "61 3 * * *", "directory": "b"}, "service.backup.schedule", "invalid cron expression"),
        ({"schedule": "90s", "directory": "b"}, "service.backup.schedule", "whole minutes"),
        ({"schedule": "daily"}, "service.backup.directory", "missing required key"),
        ({"schedule": "daily", "directory": "b", "keep": 0}, "service.backup.keep", "less than the minimum"),
        ({"schedule": "daily", "directory": "b", "scope": "everything"}, "service.backup.scope", "is not one of"),
    ],
)
def test_service_backup_is_refused_naming_file_line_and_key(config_dir, backup, key, message):
    config_dir.service["backup"] = backup
    config_dir.write()
    with pytest.raises(ConfigError) as refused:
        load_gateway_config(config_dir.path, {})
    problem = next(p for p in refused.value.problems if p.key == key)
    assert message in problem.message and problem.file == config_dir.path / "config.yaml" and problem.line


def test_service_backup_directory_is_relative_to_its_file(config_dir):
    config_dir.service["backup"] = {"schedule": "weekly", "directory": "../archives"}
    config_dir.write()
    backup = load_gateway_config(config_dir.path, {}).service.backup
    assert backup is not None
    assert (backup.directory, backup.keep, backup.scope) == (config_dir.path.parent / "archives", 7, "config")


def test_rotation_keeps_the_newest_archives_only(tmp_path):
    names = [f"ductile-2026010{d}T030000Z.tar.gz" for d in range(1, 6)]
    for name in [*names, "notes.txt", ".ductile-backup-x"]:
        (tmp_path / name).write_text("x")
    removed = rotate(tmp_path, 2)
    assert [p.name for p in removed] == names[:3]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names[3:], "notes.txt", ".ductile-backup-x"])
