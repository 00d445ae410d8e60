"""Every hand-written statement of ledger/sql.py, run as written on this test run's backend.

Runs on SQLite and, in CI's second pass, on PostgreSQL: the statements are the ones the ORM
would not write, so they are the ones most likely to differ between the two.
"""

from __future__ import annotations

import json
from datetime import UTC, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from ledger import sql
from ledger.models import Job, JobSpec, JobTransition, PluginState, ScheduleEntry
from ledger.models.jobs import QueueLook
from ledger.models.schedules import ScheduleStatus
from ledger.states import JobStatus
from ledger.submitters import Submitter
from ledger.writes.transaction import writing

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def enqueue(plugin: str = "echo", command: str = "poll", **kw: Any) -> str:
    spec = JobSpec(plugin=plugin, command=command, submitter=Submitter.CLI, **kw)
    return Job.objects.enqueue(spec, default_dedupe_ttl=0).job_id


def run_claim(plugins: list[str], worker: str = "w1", only: str | None = None) -> Job | None:
    now = timezone.now()
    params: list[Any] = [
        worker,
        sql.prep(Job, "lease_until", now + timedelta(seconds=60)),
        sql.prep(Job, "started_at", now),
        *plugins,
        sql.prep(Job, "next_retry_at", now),
    ]
    if only is not None:
        params.append(only)
    with writing():
        cursor = sql.execute(
            sql.claim(len(plugins), only is not None, connection.vendor, sql.select_columns(Job)), params
        )
        row = cursor.fetchone()
        cursor.close()
    return None if row is None else sql.from_row(Job, row[: len(sql.plan(Job).columns)])


def test_claim_takes_the_oldest_runnable_job_of_the_open_plugins_and_returns_its_whole_row():
    later = enqueue(payload={"n": 1})
    Job.objects.filter(pk=later).update(created_at=timezone.now() + timedelta(seconds=1))
    other_plugin = enqueue(plugin="stress")
    Job.objects.filter(pk=other_plugin).update(created_at=timezone.now() - timedelta(seconds=5))
    waiting = enqueue()
    Job.objects.filter(pk=waiting).update(
        created_at=timezone.now() - timedelta(seconds=5), next_retry_at=timezone.now() + timedelta(hours=1)
    )
    oldest = enqueue(payload={"n": 0})
    Job.objects.filter(pk=oldest).update(created_at=timezone.now() - timedelta(seconds=2))

    claimed = run_claim(["echo"])

    assert claimed is not None and claimed.id == oldest
    stored = Job.objects.get(pk=oldest)
    assert stored.status == JobStatus.RUNNING and stored.claimed_by == "w1"
    # The row comes back through the fields' converters: the same values the ORM reads.
    assert {f.attname: getattr(claimed, f.attname) for f in Job._meta.concrete_fields} == {
        f.attname: getattr(stored, f.attname) for f in Job._meta.concrete_fields
    }
    assert run_claim(["echo"]).id == later  # type: ignore[union-attr]
    assert run_claim(["echo"]) is None  # `waiting` waits for its next_retry_at; stress is not open


def test_claim_skips_a_job_whose_same_key_twin_runs_and_honours_only():
    first = enqueue(dedupe_key="k")
    plain = enqueue()
    assert run_claim(["echo"], only=plain).id == plain  # type: ignore[union-attr]
    assert run_claim(["echo"]).id == first  # type: ignore[union-attr]
    twin = enqueue(dedupe_key="k")  # no dedupe window here: a second job with the same key
    assert twin != first
    assert run_claim(["echo"]) is None  # the twin waits while `first` runs
    assert Job.objects.get(pk=twin).status == JobStatus.QUEUED


def rows(text: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    cursor = sql.execute(sql.native(text, connection.vendor), params or [])
    try:
        return list(cursor.fetchall())
    finally:
        cursor.close()


def test_running_counts_counts_running_jobs_per_plugin_everywhere_and_of_one_worker():
    for plugin in ("echo", "echo", "stress", "stress"):
        enqueue(plugin=plugin)
    run_claim(["echo"], worker="w1")
    run_claim(["echo"], worker="w2")
    run_claim(["stress"], worker="w2")
    found = {plugin: (everywhere, mine) for plugin, everywhere, mine in rows(sql.RUNNING_COUNTS, ["w2"])}
    assert found == {"echo": (2, 1), "stress": (1, 1)}


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_postgresql_claim_returns_what_it_overwrote_and_unclaim_puts_it_back():
    job_id = enqueue()
    retry_at = timezone.now() - timedelta(seconds=5)
    Job.objects.filter(pk=job_id).update(claimed_by="earlier", next_retry_at=retry_at)
    columns = ("status", "claimed_by", "lease_until", "started_at", "next_retry_at")
    before = Job.objects.filter(pk=job_id).values(*columns)[0]
    now = timezone.now()
    params = [
        "w1",
        sql.prep(Job, "lease_until", now),
        sql.prep(Job, "started_at", now),
        "echo",
        sql.prep(Job, "next_retry_at", now),
    ]
    with writing():
        row = sql.fetch_row(sql.claim(1, False, "postgresql", sql.select_columns(Job)), params)
        assert row is not None
        was = row[-len(sql.WAS) :]
        assert was[0] == "earlier" and was[3] == retry_at
        assert Job.objects.get(pk=job_id).status == JobStatus.RUNNING
        sql.execute(sql.UNCLAIM, [*was, job_id]).close()
    after = Job.objects.filter(pk=job_id).values(*columns)[0]
    assert after == before


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.django_db(transaction=True)  # the locks' end is the real transaction's end, a commit
def test_the_claim_guards_locks_are_held_to_the_end_of_the_transaction():
    def held() -> list[tuple[Any, ...]]:
        return rows(
            "SELECT classid::bigint, COUNT(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND classid IN (7242031, 7242032) AND granted GROUP BY classid ORDER BY classid"
        )

    with writing():
        sql.execute(sql.CAP_LOCK, ["echo"]).close()
        sql.execute(sql.KEY_LOCK, ["echo\x1fpoll\x1fk"]).close()
        assert held() == [(7242031, 1), (7242032, 1)]
    assert held() == []


def entry(schedule_id: str, due: Any) -> ScheduleEntry:
    return ScheduleEntry.objects.create(plugin="echo", schedule_id=schedule_id, command="poll", next_run_at=due)


def take(ids: list[int], due: Any, following: Any, status: str = ScheduleStatus.ACTIVE) -> list[int]:
    now = timezone.now()
    stamp = sql.prep(ScheduleEntry, "updated_at", now)
    params = [sql.prep(ScheduleEntry, "next_run_at", following), stamp, status, stamp]
    params += [*ids, ScheduleStatus.ACTIVE, sql.prep(ScheduleEntry, "next_run_at", due)]
    with writing():
        cursor = sql.execute(sql.schedule_take(len(ids), connection.vendor), params)
        try:
            return sorted(row[0] for row in cursor.fetchall())
        finally:
            cursor.close()


def test_schedule_take_moves_each_due_entry_on_once():
    due = timezone.now().replace(microsecond=0)
    following = due + timedelta(hours=1)
    a, b, moved = entry("a", due), entry("b", due), entry("c", due - timedelta(minutes=1))
    paused = entry("d", due)
    ScheduleEntry.objects.filter(pk=paused.pk).update(status=ScheduleStatus.PAUSED_MANUAL)

    assert take([a.pk, b.pk, moved.pk, paused.pk], due, following) == sorted([a.pk, b.pk])
    assert take([a.pk, b.pk], due, following) == []  # a second scheduler with the same reading wins nothing
    a.refresh_from_db()
    assert a.next_run_at == following and a.last_fired_at is not None
    assert take([moved.pk], due - timedelta(minutes=1), None, ScheduleStatus.EXHAUSTED) == [moved.pk]
    moved.refresh_from_db()
    assert moved.status == ScheduleStatus.EXHAUSTED and moved.next_run_at is None


def test_schedule_fired_records_each_entrys_newest_job():
    a, b = entry("a", None), entry("b", None)
    stamp = sql.prep(ScheduleEntry, "updated_at", timezone.now())
    with writing():
        sql.execute_many(
            sql.native(sql.SCHEDULE_FIRED, connection.vendor), [("job-a", stamp, a.pk), ("job-b", stamp, b.pk)]
        )
    assert dict(ScheduleEntry.objects.values_list("schedule_id", "last_job_id")) == {"a": "job-a", "b": "job-b"}


def test_plugin_state_reads_the_stored_state():
    PluginState.objects.create(plugin_name="echo", state={"cursor": 7, "text": "é"})
    value = sql.fetch_value(sql.PLUGIN_STATE, ["echo"])
    assert (json.loads(value) if isinstance(value, str | bytes) else value) == {"cursor": 7, "text": "é"}
    assert sql.fetch_value(sql.PLUGIN_STATE, ["absent"]) is None


def test_change_marker_moves_with_a_transition_and_not_otherwise():
    before = rows(sql.CHANGE_MARKER)
    assert rows(sql.CHANGE_MARKER) == before
    job_id = enqueue()
    after_enqueue = rows(sql.CHANGE_MARKER)
    assert after_enqueue != before
    job = Job.objects.get(pk=job_id)
    with writing():
        JobTransition.record(job, JobStatus.QUEUED, JobStatus.RUNNING, "test", now=timezone.now(), worker="w1")
    assert rows(sql.CHANGE_MARKER) != after_enqueue


def test_distinct_values_lists_each_value_once_smallest_first_up_to_the_limit():
    for plugin in ("stress", "echo", "echo", "alpha", "stress"):
        enqueue(plugin=plugin)
    text = sql.distinct_values(Job._meta.db_table, "plugin")
    assert rows(text, [10]) == [("alpha",), ("echo",), ("stress",)]
    assert rows(text, [2]) == [("alpha",), ("echo",)]


def test_an_idle_look_sees_due_and_waiting_queued_jobs_of_the_plugins_only() -> None:
    now = timezone.now()
    assert Job.objects.look(["echo"], now) == QueueLook(due=False, queued=False)
    later = enqueue()
    Job.objects.filter(pk=later).update(next_retry_at=now + timedelta(hours=1))
    enqueue(plugin="stress")
    # Not due yet, but queued; stress is not asked about.
    assert Job.objects.look(["echo"], now) == QueueLook(due=False, queued=True)
    assert Job.objects.look(["echo", "stress"], now).due
    assert Job.objects.look(["echo"], now + timedelta(hours=2)).due
    run_claim(["stress"])
    assert Job.objects.look(["stress"], now) == QueueLook(due=False, queued=False)  # running, not queued


def test_context_hop_reads_a_steps_pipeline_and_baggage() -> None:
    from ledger.models import EventContext

    context_id = EventContext.record(
        parent_id=None, pipeline="nightly", step="crunch", accumulated={"n": 1, "s": "é"}, now=timezone.now()
    )
    assert EventContext.hop(context_id) == ("nightly", "crunch", {"n": 1, "s": "é"})
    assert EventContext.hop("absent") is None


def test_a_claim_returns_the_plugins_state_and_the_jobs_pipeline_hop() -> None:
    """ledger.sql.CLAIM_READS: what the executor needs before the spawn, read by the claim itself,
    the same as the separate reads (PLUGIN_STATE, CONTEXT_HOP) it replaces."""
    from ledger.models import EventContext

    PluginState.objects.create(plugin_name="echo", state={"cursor": 7, "text": "é"})
    context_id = EventContext.record(
        parent_id=None, pipeline="nightly", step="crunch", accumulated={"n": 1}, now=timezone.now()
    )
    hop_job, plain_job, orphan_job = (
        enqueue(event_context_id=context_id),
        enqueue(plugin="stress"),
        enqueue(event_context_id="absent"),
    )
    caps = {"echo": 5, "stress": 5}
    claimed = {}
    for _ in range(3):
        job = Job.objects.claim_next(worker_id="w1", caps=caps, lease_ttl=60)
        assert job is not None and job.claim_reads is not None
        claimed[job.id] = job.claim_reads

    assert claimed[hop_job].state == {"cursor": 7, "text": "é"}
    assert claimed[hop_job].hop == EventContext.hop(context_id) == ("nightly", "crunch", {"n": 1})
    assert claimed[plain_job].state == {} and claimed[plain_job].hop is None  # no state row, no context
    assert claimed[orphan_job].hop is None  # a context id whose row is gone, as EventContext.hop says
    assert Job.objects.get(pk=hop_job).claim_reads is None  # not a column: only what a claim returned


def test_an_instant_is_bound_exactly_as_django_would_bind_it():
    # The fast path for aware UTC instants (ledger.sql._datetime_adapter) and Django's own
    # adaptation must agree to the character: the stored text is what every ORM filter compares.
    import zoneinfo
    from datetime import datetime
    from datetime import timezone as dt_timezone

    adapt = sql.plan(Job).adapters["created_at"]
    instants = [
        timezone.now(),
        datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC),  # no microseconds: str() drops them
        datetime(2026, 11, 25, 12, 0, 0, 7, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, 0, 250000, tzinfo=zoneinfo.ZoneInfo("Europe/Berlin")),
        datetime(2026, 11, 25, 12, 0, 0, tzinfo=dt_timezone(timedelta(hours=-5))),
        None,
    ]
    for instant in instants:
        assert adapt(instant) == connection.ops.adapt_datetimefield_value(instant), instant


def test_a_row_read_by_hand_becomes_the_job_the_orm_reads():
    # ledger.sql.from_row converts a row as the ORM does (datetimes through the fast path on
    # SQLite, JSON through the field): the executor's job must equal the one the console shows.
    from datetime import datetime

    job_id = enqueue(payload={"n": 1, "s": "é"})
    whole_second = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)  # stored without microseconds
    Job.objects.filter(pk=job_id).update(started_at=whole_second, lease_until=timezone.now())
    row = sql.fetch_row(f"SELECT {sql.select_columns(Job)} FROM job_queue WHERE id = %s", [job_id])
    assert row is not None
    by_hand, by_orm = sql.from_row(Job, row), Job.objects.get(pk=job_id)
    for field in Job._meta.concrete_fields:
        assert getattr(by_hand, field.attname) == getattr(by_orm, field.attname), field.attname
    assert by_hand.started_at == whole_second and by_hand.started_at.tzinfo is not None
    assert by_hand.completed_at is None and by_hand.payload == {"n": 1, "s": "é"}
    # Built without Model.__init__: a saved row of this database, as Model.from_db makes one.
    assert (by_hand._state.adding, by_hand._state.db) == (by_orm._state.adding, by_orm._state.db) == (False, "default")
    assert by_hand == by_orm and by_hand.get_deferred_fields() == set()
    by_hand.last_error = "changed by hand"
    by_hand.save(update_fields=["last_error"])
    by_orm.refresh_from_db()
    assert by_orm.last_error == "changed by hand"
