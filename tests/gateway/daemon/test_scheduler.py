"""The scheduler loop with a controlled clock and real plugin processes: `every` counted from the
last success (and a failed run run again), every catch-up policy after a 3-hour downtime, every
if_running policy with a job in flight, the poll guard, one-shot exhaustion, two schedulers
racing, invalid entries paused with a reason, manual pause, the circuit breaker sequence through
real failing jobs, and the `scheduler.*` events in event_log and heard by pipelines."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gateway.daemon.scheduler import FIRE_BATCH, Scheduler
from gateway.runtime import RUNTIME
from ledger.models import (
    BreakerState,
    CircuitBreaker,
    CircuitBreakerTransition,
    EventRecord,
    Job,
    JobSpec,
    ScheduleEntry,
    ScheduleStatus,
)
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.jobs import run_until_idle
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)  # a Monday, on every grid


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def scheduler(config_dir, clock, **plugin_fields) -> Scheduler:
    for name, fields in plugin_fields.items():
        config_dir.plugins[name] = {**config_dir.plugins.get(name, {}), **fields}
    load_runtime(config_dir)
    loop = Scheduler(RUNTIME, clock=clock, install_signals=False)
    loop.start(clock())
    return loop


def stress(*schedules, **fields):
    return {"config": {}, "retry": {"max_attempts": 1}, "schedules": list(schedules), **fields}


def row(plugin="stress", schedule_id="default") -> ScheduleEntry:
    return ScheduleEntry.objects.get(plugin=plugin, schedule_id=schedule_id)


def jobs(**filters):
    return list(Job.objects.filter(submitted_by=Submitter.SCHEDULER, **filters).order_by("created_at"))


def real_now() -> datetime:
    """Workers stamp outcomes with the real time: tests that run jobs start their clock there."""
    return datetime.now(UTC).replace(microsecond=0)


def test_every_runs_at_once_then_an_interval_after_each_success_not_on_a_grid(config_dir):
    """Item 102 (spec 000 §4.2: next_run = last_successful_run + interval)."""
    T0 = real_now()
    clock = Clock(T0)
    loop = scheduler(config_dir, clock, stress=stress({"every": "7m", "payload": {"mode": "ok"}}))
    assert row().next_run_at == T0  # a new entry runs at once, not at the next 7-minute mark
    fired = loop.tick(T0)
    (job,) = jobs()
    assert fired[0].job_ids == (job.id,)
    assert (job.plugin, job.command, job.dedupe_key, job.payload) == (
        "stress",
        "poll",
        "stress:poll:default",
        {"mode": "ok"},
    )
    # While the run is out, the next one is an interval after the firing.
    assert row().next_run_at == T0 + timedelta(minutes=7) and row().last_job_id == job.id
    run_until_idle(RUNTIME)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and job.completed_at is not None
    assert loop.tick(T0 + timedelta(seconds=1)) == []
    entry = row()
    assert (entry.last_success_job_id, entry.last_success_at) == (job.id, job.completed_at)
    assert entry.next_run_at == job.completed_at + timedelta(minutes=7)  # from the success's end
    assert loop.tick(entry.next_run_at - timedelta(microseconds=1)) == []
    assert len(loop.tick(entry.next_run_at)[0].job_ids) == 1


def test_a_failed_every_run_runs_again_at_the_next_tick(config_dir):
    T0 = real_now()
    clock = Clock(T0)
    entry = {"every": "1h", "payload": {"mode": "error"}}
    loop = scheduler(config_dir, clock, stress=stress(entry, circuit_breaker={"threshold": 5, "reset_after": "30m"}))
    loop.tick(T0)
    run_until_idle(RUNTIME)
    assert [j.status for j in jobs()] == [JobStatus.DEAD]
    # Not an hour later: the run that failed is run again now (the breaker bounds how often).
    fired = loop.tick(T0 + timedelta(seconds=30))
    assert len(fired) == 1 and len(fired[0].job_ids) == 1 and len(jobs()) == 2
    assert row().last_success_at is None and row().next_run_at == T0 + timedelta(seconds=30, hours=1)


@pytest.mark.parametrize(("policy", "expected"), [("skip", 1), ("run_once", 1), ("run_all", 12)])
def test_catch_up_after_three_hours_of_downtime(config_dir, policy, expected):
    clock = Clock(T0)
    loop = scheduler(config_dir, clock, stress=stress({"every": "15m", "catch_up": policy, "if_running": "queue"}))
    loop.tick(T0)  # the first run; it never ends (no worker), so the next is 15 minutes after it
    assert row().next_run_at == T0 + timedelta(minutes=15)
    # The scheduler is down from T0 until three hours later: 12 runs (09:15 ... 12:00) were missed.
    now = T0 + timedelta(hours=3, seconds=30)
    loop.tick(now)
    fired = jobs()[1:]
    assert len(fired) == expected
    keys = [j.dedupe_key for j in fired]
    if policy == "skip":
        assert keys == ["stress:poll:default"]  # the run due now, none of the missed ones
    else:
        assert keys[0] == "stress:poll:default:catchup:2026-11-23T09:15:00Z"
        assert len(set(keys)) == expected and all(":catchup:" in k for k in keys)
    # Then it goes on from this firing, never bursting again for the same gap.
    assert row().next_run_at == now + timedelta(minutes=15)
    assert loop.tick(now + timedelta(seconds=1)) == []


def claim_one():
    runtime = RUNTIME.get()
    return Job.objects.claim_next(worker_id="w-slow", caps=runtime.claim_caps(), lease_ttl=600)


@pytest.mark.parametrize("policy", ["skip", "queue", "cancel"])
def test_if_running_with_a_slow_job_in_flight(config_dir, policy):
    clock = Clock(T0)
    entry = {"every": "5m", "if_running": policy}
    loop = scheduler(config_dir, clock, stress=stress(entry, max_outstanding_polls=10))
    loop.tick(T0)
    assert claim_one().status == JobStatus.RUNNING  # the first run is in flight (a slow plugin)
    loop.tick(T0 + timedelta(minutes=5))  # queued behind it (skip would not have queued it)
    loop.tick(T0 + timedelta(minutes=10))
    statuses = [j.status for j in jobs()]
    if policy == "skip":
        assert statuses == ["running"]
    elif policy == "queue":
        assert statuses == ["running", "queued", "queued"]
    else:
        # cancel: the run queued at :05 is cancelled by the one at :10; the running one is left.
        assert statuses == ["running", "dead", "queued"]
        assert "cancelled by schedule stress:default (if_running: cancel)" in jobs()[1].last_error


def test_the_poll_guard_skips_while_a_scheduled_poll_is_outstanding(config_dir):
    clock = Clock(T0)
    loop = scheduler(
        config_dir,
        clock,
        stress=stress({"id": "a", "every": "5m", "if_running": "queue"}, {"id": "b", "every": "10m"}),
    )
    fired = loop.tick(T0)  # both due at once: a fires (queue policy ignores the guard), b waits
    skipped = {f.address: f.skipped for f in fired}
    assert skipped["stress:b"] is not None and "max_outstanding_polls: 1" in skipped["stress:b"]
    assert skipped["stress:a"] is None


def test_at_and_after_fire_once_then_are_exhausted(config_dir):
    clock = Clock(T0)
    loop = scheduler(
        config_dir,
        clock,
        stress=stress(
            {"id": "past", "at": "2026-11-23T08:00:00Z"},  # due while we were down: fires at once
            {"id": "later", "after": "10m", "if_running": "queue"},
            max_outstanding_polls=5,
        ),
    )
    assert [f.address for f in loop.tick(T0)] == ["stress:past"]
    assert row(schedule_id="past").status == ScheduleStatus.EXHAUSTED and row(schedule_id="past").next_run_at is None
    assert loop.tick(T0 + timedelta(minutes=9)) == []
    assert [f.address for f in loop.tick(T0 + timedelta(minutes=10))] == ["stress:later"]
    assert row(schedule_id="later").status == ScheduleStatus.EXHAUSTED
    assert loop.tick(T0 + timedelta(days=1)) == []
    loop.sync(T0 + timedelta(days=1))  # a reload re-arms neither
    assert row(schedule_id="past").status == ScheduleStatus.EXHAUSTED
    assert row(schedule_id="later").status == ScheduleStatus.EXHAUSTED
    # A restart re-arms `after` (its delay counts from each start), never a fired `at`.
    restarted = Scheduler(RUNTIME, clock=Clock(T0 + timedelta(days=2)), install_signals=False)
    restarted.start(T0 + timedelta(days=2))
    assert row(schedule_id="past").status == ScheduleStatus.EXHAUSTED
    later = row(schedule_id="later")
    assert later.status == ScheduleStatus.ACTIVE and later.next_run_at == T0 + timedelta(days=2, minutes=10)


def test_two_schedulers_racing_for_one_due_run_fire_it_once(config_dir):
    clock = Clock(T0)
    first = scheduler(config_dir, clock, stress=stress({"every": "5m"}))
    second = Scheduler(RUNTIME, clock=clock, install_signals=False)
    second.sync(T0)
    due = T0
    # Both read the due row before either fires it.
    seen_by_first, seen_by_second = row(), row()
    schedule = first.schedules[("stress", "default")]
    assert [f.address for f in first.fire([(schedule, seen_by_first)], due)] == ["stress:default"]
    assert second.fire([(schedule, seen_by_second)], due) == []
    assert len(jobs()) == 1


def test_an_entry_whose_plugin_cannot_run_is_paused_with_the_reason_and_resumes_when_fixed(config_dir):
    clock = Clock(T0)
    # (A command the plugin lacks is refused with the config: tests/gateway/config/test_config_refusals.py.)
    config_dir.plugins["echo"] = {"config": {}, "uses": "no-such-plugin", "schedules": [{"every": "5m"}]}
    loop = scheduler(config_dir, clock)
    paused = row("echo")
    assert paused.status == ScheduleStatus.PAUSED_INVALID
    assert paused.reason is not None and "no-such-plugin" in paused.reason
    assert loop.tick(T0 + timedelta(hours=1)) == []
    del config_dir.plugins["echo"]["uses"]
    scheduler(config_dir, clock)
    assert row("echo").status == ScheduleStatus.ACTIVE and row("echo").reason is None


def test_a_manual_pause_survives_sync_and_resume_restarts_from_now(config_dir):
    clock = Clock(T0)
    loop = scheduler(config_dir, clock, stress=stress({"every": "5m"}))
    row().pause("operator", manual=True, now=T0)
    loop.sync(T0)
    assert loop.tick(T0 + timedelta(hours=1)) == [] and row().status == ScheduleStatus.PAUSED_MANUAL


def test_the_breaker_opens_on_scheduled_failures_probes_after_cooldown_and_closes(config_dir):
    # Workers record outcomes at the real time, so this test's clock starts at the real time too:
    # the cooldown arithmetic then spans both clocks.
    T0 = real_now()
    clock = Clock(T0)
    entry = {"every": "5m", "payload": {"mode": "error"}}
    loop = scheduler(config_dir, clock, stress=stress(entry, circuit_breaker={"threshold": 3, "reset_after": "30m"}))

    def run_due(at):
        loop.tick(at)
        run_until_idle(RUNTIME)

    for n in (0, 1, 2):  # a failed run runs again at the next tick
        run_due(T0 + timedelta(minutes=n))
    breaker = CircuitBreaker.objects.get(plugin="stress", command="poll")
    assert (breaker.state, breaker.failure_count) == (BreakerState.OPEN, 3)
    # API and CLI jobs are never blocked, and their failures do not count.
    Job.objects.enqueue(JobSpec("stress", "poll", Submitter.CLI, payload={"mode": "error"}), default_dedupe_ttl=60)
    run_due(T0 + timedelta(minutes=3))
    assert CircuitBreaker.objects.get(plugin="stress").failure_count == 3
    cooldown = timedelta(minutes=30)

    def until_probe(start):
        """Tick every 5 minutes: blocked until 30 minutes after the breaker opened, then one probe."""
        opened = CircuitBreaker.objects.get(plugin="stress").opened_at
        at = start
        while True:
            before = len(jobs())
            run_due(at)
            if at - opened < cooldown:
                assert len(jobs()) == before, f"enqueued while open at {at - opened}"
            else:
                assert len(jobs()) == before + 1  # exactly one probe
                return at
            at += timedelta(minutes=5)

    at = until_probe(T0 + timedelta(minutes=5))
    assert CircuitBreaker.objects.get(plugin="stress").state == BreakerState.OPEN  # the probe failed
    # Fix the plugin's input; after the next cooldown the probe succeeds and the breaker closes.
    entry["payload"] = {"mode": "ok"}
    clock.now = at  # the reload happens now: the changed entry restarts from here
    loop = scheduler(config_dir, clock, stress=stress(entry, circuit_breaker={"threshold": 3, "reset_after": "30m"}))
    at = until_probe(at + timedelta(minutes=5))
    breaker = CircuitBreaker.objects.get(plugin="stress", command="poll")
    assert (breaker.state, breaker.failure_count) == (BreakerState.CLOSED, 0)
    # Workers stamp transitions with the real time and the scheduler with this test's clock, so
    # compare them as a set of facts (the order is what the state checks above walked through).
    reasons = sorted(CircuitBreakerTransition.objects.values_list("reason", "to_state"))
    assert reasons == sorted(
        [
            ("failure_threshold", "open"),
            ("cooldown_elapsed", "half_open"),
            ("failure_threshold", "open"),
            ("cooldown_elapsed", "half_open"),
            ("success", "closed"),
        ]
    )
    assert row().last_success_job_id is None  # learnt at the next tick
    probe = jobs()[-1]
    loop.tick(at + timedelta(minutes=1))
    assert row().last_success_job_id == probe.id and probe.status == JobStatus.SUCCEEDED


def test_a_burst_of_due_entries_fires_every_one_across_batches(config_dir):
    # More entries than one transaction fires (FIRE_BATCH), all due at the same instant.
    count = FIRE_BATCH * 2 + 50
    clock = Clock(T0)
    entries = [{"id": f"e{n:03d}", "at": "2026-11-23T09:05:00Z"} for n in range(count)]
    loop = scheduler(config_dir, clock, stress=stress(*entries, max_outstanding_polls=count))
    fired = loop.tick(T0 + timedelta(minutes=5))
    assert sorted(f.address for f in fired) == [f"stress:e{n:03d}" for n in range(count)]
    assert all(len(f.job_ids) == 1 and f.skipped is None for f in fired)
    by_key = {j.dedupe_key: j for j in jobs()}
    assert len(by_key) == count
    for entry in ScheduleEntry.objects.all():
        assert entry.status == ScheduleStatus.EXHAUSTED
        assert entry.last_job_id == by_key[f"stress:poll:{entry.schedule_id}"].id
    assert loop.tick(T0 + timedelta(minutes=6)) == []


def test_the_poll_guard_counts_the_runs_its_batch_admitted_before(config_dir):
    clock = Clock(T0)
    loop = scheduler(config_dir, clock, stress=stress({"id": "a", "every": "5m"}, {"id": "b", "every": "5m"}))
    fired = loop.tick(T0)  # both due together, one poll allowed
    assert len(jobs()) == 1
    (skipped,) = [f for f in fired if f.skipped]
    assert skipped.skipped is not None
    assert "1 scheduled poll(s) outstanding (max_outstanding_polls: 1)" in skipped.skipped


def test_a_half_open_breaker_sends_one_probe_when_two_entries_of_its_target_are_due_together(config_dir):
    clock = Clock(T0)
    loop = scheduler(
        config_dir,
        clock,
        stress=stress({"id": "a", "every": "5m"}, {"id": "b", "every": "5m"}, max_outstanding_polls=5),
    )
    CircuitBreaker.objects.create(
        plugin="stress", command="poll", state=BreakerState.OPEN, failure_count=3, opened_at=T0 - timedelta(hours=1)
    )
    fired = loop.tick(T0)
    (probe,) = jobs()
    assert sorted((f.job_ids, f.skipped) for f in fired) == [((), "circuit breaker half_open"), ((probe.id,), None)]
    breaker = CircuitBreaker.objects.get(plugin="stress")
    assert (breaker.state, breaker.last_job_id) == (BreakerState.HALF_OPEN, probe.id)


def test_an_entry_that_cannot_fire_does_not_hold_up_the_rest_of_its_batch(config_dir, monkeypatch, caplog):
    clock = Clock(T0)
    loop = scheduler(
        config_dir,
        clock,
        stress=stress(*({"id": name, "every": "5m"} for name in ("a", "b", "c")), max_outstanding_polls=5),
    )
    planned = Scheduler._plan

    def broken_b(self, schedule, row, now):
        if schedule.id == "b":
            raise RuntimeError("cannot compute b's next run")
        return planned(self, schedule, row, now)

    monkeypatch.setattr(Scheduler, "_plan", broken_b)
    monkeypatch.setattr(logging.getLogger("ductile"), "propagate", True)  # to caplog
    fired = loop.tick(T0)
    assert sorted(f.address for f in fired) == ["stress:a", "stress:c"]
    assert sorted(j.dedupe_key for j in jobs()) == ["stress:poll:a", "stress:poll:c"]
    assert "schedule stress:b: firing failed; retried at the next tick" in caplog.text
    assert row(schedule_id="b").next_run_at == T0  # still due, nothing lost
    monkeypatch.setattr(Scheduler, "_plan", planned)
    assert [f.address for f in loop.tick(T0 + timedelta(minutes=1))] == ["stress:b"]


def test_each_batch_of_a_long_tick_is_stamped_with_its_own_start(config_dir):
    """created_at says when a run was really enqueued, not when its tick began."""

    class Ticking(Clock):
        def __call__(self) -> datetime:
            self.now += timedelta(seconds=1)  # every reading is a second later
            return self.now

    count = FIRE_BATCH * 2 + 10
    clock = Ticking(T0)
    entries = [{"id": f"e{n:03d}", "at": "2026-11-23T09:05:00Z"} for n in range(count)]
    loop = scheduler(config_dir, clock, stress=stress(*entries, max_outstanding_polls=count))
    due = T0 + timedelta(minutes=5)
    clock.now = due
    loop.tick(due)
    stamps = sorted({j.created_at for j in jobs()})
    assert len(stamps) == 3 and stamps[0] > due
    assert sorted(len(jobs(created_at=s)) for s in stamps) == [10, FIRE_BATCH, FIRE_BATCH]


# -- the scheduler's own events: event_log, and pipelines listening with `on:` -------------------


def listening(config_dir, *events: str) -> None:
    """A pipeline per event, whose one step (echo) starts when the scheduler announces it."""
    config_dir.extra["pipelines"] = [
        {"name": f"heard-{n}", "on": event, "steps": [{"id": "tell", "uses": "echo"}]} for n, event in enumerate(events)
    ]


def event_of(job: Job) -> dict[str, Any]:
    assert job.event is not None
    return job.event


def heard(event_type: str) -> list[Job]:
    """The jobs the pipelines listening to `event_type` started."""
    return [j for j in Job.objects.filter(plugin="echo").order_by("created_at") if event_of(j)["type"] == event_type]


def announced(event_type: str) -> list[EventRecord]:
    return list(EventRecord.objects.filter(type=event_type).order_by("id"))


def test_a_skipped_run_is_announced_with_its_reason_and_heard_by_a_pipeline(config_dir):
    """Items 102, 109, 110: `scheduler.skipped` (the original's event and payload fields)."""
    listening(config_dir, "scheduler.skipped")
    loop = scheduler(config_dir, Clock(T0), stress=stress({"id": "a", "every": "5m"}, {"id": "b", "every": "5m"}))
    (skipped,) = [f for f in loop.tick(T0) if f.skipped]  # one poll at a time: the other waits
    (event,) = announced("scheduler.skipped")
    assert (event.source, event.job_id) == ("scheduler", None)
    assert event.payload == {
        "plugin": "stress",
        "schedule_id": skipped.address.split(":")[1],
        "command": "poll",
        "reason": "outstanding_limit",
        "message": "1 scheduled poll(s) outstanding (max_outstanding_polls: 1)",
        "next_run_at": "2026-11-23T09:05:00Z",
    }
    (job,) = heard("scheduler.skipped")
    assert job.submitted_by == Submitter.SYSTEM and event_of(job)["payload"]["reason"] == "outstanding_limit"
    assert event_of(job)["event_id"] == event.event_id


def test_breaker_changes_are_announced_once_each_and_heard_by_pipelines(config_dir):
    listening(config_dir, "scheduler.circuit_state_changed", "scheduler.circuit_half_open", "scheduler.skipped")
    T0 = real_now()
    clock = Clock(T0)
    entry = {"every": "5m", "payload": {"mode": "error"}}
    loop = scheduler(config_dir, clock, stress=stress(entry, circuit_breaker={"threshold": 1, "reset_after": "30m"}))
    loop.tick(T0)
    run_until_idle(RUNTIME, plugins={"stress"})  # fails: the breaker opens
    (failed,) = jobs()
    loop.tick(T0 + timedelta(minutes=1))  # announced; the failed run, due again, meets the open breaker
    (opened,) = announced("scheduler.circuit_state_changed")
    assert opened.payload == {
        "plugin": "stress",
        "command": "poll",
        "previous_state": "closed",
        "state": "open",
        "failure_count": 1,
        "reason": "failure_threshold",
        "job_id": failed.id,
    }
    assert [event_of(j)["payload"]["state"] for j in heard("scheduler.circuit_state_changed")] == ["open"]
    assert [e.payload["reason"] for e in announced("scheduler.skipped")] == ["circuit_open"]
    # The cooldown elapses: the breaker turns half-open and sends one probe, announced next tick.
    clock.now = T0 + timedelta(minutes=31)
    loop.tick(clock.now)
    loop.tick(clock.now + timedelta(seconds=1))
    (half_open,) = announced("scheduler.circuit_half_open")
    assert half_open.payload == {"plugin": "stress", "command": "poll"}
    assert len(heard("scheduler.circuit_half_open")) == 1
    # An operator's reset is a change of state too; nothing is announced twice.
    CircuitBreaker.objects.filter(plugin="stress").reset(by="cli")
    loop.tick(clock.now + timedelta(seconds=2))
    loop.tick(clock.now + timedelta(seconds=3))
    changes = [
        (e.payload["previous_state"], e.payload["state"], e.payload["reason"])
        for e in announced("scheduler.circuit_state_changed")
    ]
    assert changes == [("closed", "open", "failure_threshold"), ("half_open", "closed", "manual_reset")]
    assert len(announced("scheduler.circuit_half_open")) == 1
    assert [event_of(j)["payload"]["state"] for j in heard("scheduler.circuit_state_changed")] == ["open", "closed"]


def test_a_run_that_comes_while_the_entry_is_paused_is_announced_once(config_dir):
    listening(config_dir, "scheduler.skipped")
    loop = scheduler(config_dir, Clock(T0), stress=stress({"id": "tick", "cron": "*/5 * * * *"}))
    row(schedule_id="tick").pause_by_hand(by="cli", now=T0)
    assert loop.tick(T0 + timedelta(minutes=5)) == []  # nothing enqueued for the paused entry...
    (event,) = announced("scheduler.skipped")  # ...but its run is announced as skipped, once
    assert {k: event.payload[k] for k in ("schedule_id", "reason", "next_run_at")} == {
        "schedule_id": "tick",
        "reason": "schedule_paused_manual",
        "next_run_at": "2026-11-23T09:10:00Z",
    }
    assert loop.tick(T0 + timedelta(minutes=6)) == [] and len(announced("scheduler.skipped")) == 1
    assert row(schedule_id="tick").next_run_at == T0 + timedelta(minutes=10)
    assert [event_of(j)["payload"]["reason"] for j in heard("scheduler.skipped")] == ["schedule_paused_manual"]
    assert jobs() == []
