"""The `runscheduler` daemon: keeps `schedule_entries` in step with the config and enqueues due
runs through the queue (spec 000 §4, "Scheduler"; ARCHITECTURE "Processes").

Each due run is taken by compare-and-set on the `next_run_at` it was read with, in the same
transaction that gates it (circuit breaker, if_running, poll guard) and enqueues it, so several
schedulers on one database fire a run exactly once and a crash never loses a taken run. Time is
passed in (`tick(now)`), so tests drive the clock and never sleep.

Each tick first learns how the entries' last runs ended (an `every` entry's next run counts from
its last success; a failed one runs again now) and announces the circuit breakers' changes; a due
run that is not enqueued is announced too. These `scheduler.*` events (the original's names and
payloads) are recorded in event_log and start the pipelines whose `on:` names them.
"""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from types import FrameType
from typing import Any

import blake3
from django.db import OperationalError, close_old_connections, connections
from django.db.models import Count, Min
from django.utils import timezone

from gateway import intake
from gateway.config.errors import ConfigError
from gateway.config.frozen import thaw
from gateway.config.schedules import CatchUp, IfRunning, Kind, Schedule
from gateway.daemon.presence import Presence
from gateway.intake.events import announce
from gateway.logs import logger
from gateway.runtime import Runtime, RuntimeHolder
from gateway.scheduler.timing import catch_up, every_run, first_due, next_run, overdue
from gateway.storage.database import ensure_schema
from gateway.storage.outage import Outage
from ledger.models import (
    BreakerState,
    CircuitBreaker,
    CircuitBreakerTransition,
    Gate,
    Job,
    JobSpec,
    ScheduleEntry,
    ScheduleStatus,
)
from ledger.models.schedules import Take
from ledger.states import JobStatus
from ledger.submitters import Submitter
from ledger.timestamps import rfc3339
from ledger.writes.transaction import writing

log = logger("scheduler")

IN_FLIGHT = (JobStatus.QUEUED, JobStatus.RUNNING)
SOURCE = "scheduler"  # the `source` of the scheduler's own events
# Due entries fired per transaction. Why batches: 1,000 entries due at one instant, fired one
# transaction each, took 2.2 s (SQLite) to 5 s (PostgreSQL); a batch shares its reads, inserts and
# commit. Why not one transaction for all: a batch holds SQLite's write lock, and workers claiming
# jobs should get it between batches (docs/performance.md, "Scheduler").
FIRE_BATCH = 100


def fingerprint(schedule: Schedule) -> str:
    body = {f.name: getattr(schedule, f.name) for f in fields(schedule)}
    body["payload"] = thaw(schedule.payload)
    return blake3.blake3(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Skip:
    """Why a due run was not enqueued: the original's reason code, and the words for people."""

    reason: str  # circuit_open, circuit_half_open, already_running, outstanding_limit, schedule_paused_manual
    message: str


@dataclass(frozen=True)
class Fired:
    """What one tick did with one due entry (for logs, tests and `--once` output)."""

    address: str
    job_ids: tuple[str, ...]
    skipped: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Due:
    """A due entry and what it owes: the dedupe keys of the runs to enqueue (one, or catch-up's
    choice after downtime; none when catch_up skips them) and where its next run moves."""

    row: ScheduleEntry
    schedule: Schedule
    due_at: datetime  # the `next_run_at` read, which the take compares against
    runs: list[str]
    following: datetime | None


class _Gates:
    """The breaker and overlap rules for one batch of taken runs (spec 000 "Circuit Breaker",
    §4.4-§4.5), read with one query each for the whole batch and kept current as the batch
    admits runs, so each entry sees the runs admitted before it as if fired one at a time."""

    def __init__(self, runtime: Runtime, batch: Sequence[Due], now: datetime):
        self.runtime, self.now = runtime, now
        schedules = [d.schedule for d in batch]
        self.breakers = CircuitBreaker.objects.locked_for((s.plugin, s.command) for s in schedules)
        self.probing: dict[tuple[str, str], CircuitBreaker] = {}
        skip_keys = [s.dedupe_key for s in schedules if s.if_running is IfRunning.SKIP]
        self.in_flight = set(
            Job.objects.filter(status__in=IN_FLIGHT, dedupe_key__in=skip_keys).values_list(
                "plugin", "command", "dedupe_key"
            )
        )
        self.polls = _scheduled_polls({s.plugin for s in schedules if s.command == "poll"})

    def admit(self, due: Due) -> tuple[list[str], Skip | None]:
        """The runs this entry may enqueue now, or why none."""
        schedule = due.schedule
        target = (schedule.plugin, schedule.command)
        gate = self._gate(target)
        if gate == Gate.BLOCKED:
            state = self.breakers[target].state
            return [], Skip(f"circuit_{state}", f"circuit breaker {state}")
        blocked = self._overlap(schedule)
        if blocked:
            return [], blocked
        runs = due.runs
        if gate == Gate.PROBE:
            self.probing[target] = self.breakers[target]
            runs = runs[:1]  # half-open lets exactly one job through
        if schedule.command == "poll":
            self.polls[schedule.plugin] += len(runs)
        return runs, None

    def sent(self, due: Due, first_job_id: str) -> None:
        breaker = self.probing.pop((due.schedule.plugin, due.schedule.command), None)
        if breaker is not None:
            breaker.probe_sent(first_job_id, now=self.now)

    def _gate(self, target: tuple[str, str]) -> Gate:
        breaker = self.breakers.get(target)
        if breaker is None:
            return Gate.PASS  # no row: closed, nothing counted yet
        if target in self.probing:
            return Gate.BLOCKED  # an earlier entry of this batch is the probe
        policy = self.runtime.config.plugins[target[0]].circuit_breaker
        probe = breaker.last_job_id
        probe_finished = probe is not None and Job.objects.filter(pk=probe).exclude(status__in=IN_FLIGHT).exists()
        return breaker.gate(reset_after=policy.reset_after, probe_finished=probe_finished, now=self.now)

    def _overlap(self, schedule: Schedule) -> Skip | None:
        """Why this run must wait for the previous ones (if_running, the poll guard), or None."""
        if schedule.if_running is IfRunning.QUEUE:
            return None  # enqueued regardless; same-key run exclusion still runs them one at a time
        if (
            schedule.if_running is IfRunning.SKIP
            and (schedule.plugin, schedule.command, schedule.dedupe_key) in self.in_flight
        ):
            return Skip("already_running", "a previous run is still queued or running (if_running: skip)")
        if schedule.if_running is IfRunning.CANCEL:
            reason = f"cancelled by schedule {schedule.plugin}:{schedule.id} (if_running: cancel)"
            cancelled = Job.objects.cancel_queued(
                [schedule.plugin], reason, now=self.now, dedupe_key=schedule.dedupe_key
            )
            if cancelled:
                log.info("schedule %s:%s cancelled %s", schedule.plugin, schedule.id, ", ".join(cancelled))
                self.polls.update(_scheduled_polls({schedule.plugin}))
        if schedule.command == "poll":
            limit = self.runtime.config.plugins[schedule.plugin].max_outstanding_polls
            if self.polls[schedule.plugin] >= limit:
                outstanding = self.polls[schedule.plugin]
                return Skip(
                    "outstanding_limit",
                    f"{outstanding} scheduled poll(s) outstanding (max_outstanding_polls: {limit})",
                )
        return None


def skipped_event(due: Due, skip: Skip) -> dict[str, Any]:
    """`scheduler.skipped`: a due run that was not enqueued, and when the entry runs next."""
    schedule = due.schedule
    payload = {
        "plugin": schedule.plugin,
        "schedule_id": schedule.id,
        "command": schedule.command,
        "reason": skip.reason,
        "message": skip.message,
        "next_run_at": rfc3339(due.following) if due.following else None,
    }
    return {"type": "scheduler.skipped", "payload": payload}


def breaker_event(transition: CircuitBreakerTransition) -> dict[str, Any]:
    """The original's two breaker events: half-open (the cooldown elapsed, a probe may go), and
    every other change of state, with the states and the failure count."""
    target = {"plugin": transition.plugin, "command": transition.command}
    if transition.to_state == BreakerState.HALF_OPEN:
        return {"type": "scheduler.circuit_half_open", "payload": target}
    payload = {
        **target,
        "previous_state": transition.from_state,
        "state": transition.to_state,
        "failure_count": transition.failure_count,
        "reason": transition.reason,
        "job_id": transition.job_id,
    }
    return {"type": "scheduler.circuit_state_changed", "payload": payload}


def _scheduled_polls(plugins: set[str]) -> Counter[str]:
    """The scheduler's queued or running polls per plugin: what max_outstanding_polls bounds."""
    counts = Counter({plugin: 0 for plugin in plugins})
    rows = (
        Job.objects.filter(
            plugin__in=plugins, command="poll", submitted_by=Submitter.SCHEDULER.value, status__in=IN_FLIGHT
        )
        .values_list("plugin")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts.update(dict(rows))
    return counts


class Scheduler:
    def __init__(
        self,
        holder: RuntimeHolder,
        *,
        clock: Callable[[], datetime] = timezone.now,
        once: bool = False,
        install_signals: bool = True,
        presence: Presence | None = None,
    ):
        """`presence`: the node row of a standalone `runscheduler` (a resident one's is its
        supervisor's)."""
        self.holder = holder
        self.clock = clock
        self.once = once
        self.presence = presence
        self.install_signals = install_signals
        self.started_at = clock()  # `after:` schedules count from here
        self.stopping = threading.Event()
        self._reload = threading.Event()
        self._wake = threading.Event()  # ends the sleep early: a stop or a reload
        self.schedules: dict[tuple[str, str], Schedule] = {}
        self._down = Outage("scheduler tick", log, floor=1.0, ceiling=30.0)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        ensure_schema()
        if self.install_signals:
            self._install_signal_handlers()
        self.start(self.clock())
        log.info("runscheduler started: %d schedule entries", len(self.schedules))
        try:
            while not self.stopping.is_set():
                delay = self._step()
                if self.once:
                    break
                if self.presence is not None:
                    delay = min(delay, self.presence.beat())
                self._wake.wait(delay)
                self._wake.clear()
        finally:
            if self.presence is not None:
                self.presence.leave()
            connections.close_all()
            log.info("runscheduler stopped")
        return 0

    def _step(self) -> float:
        """A reload if one was asked for, and a tick; the seconds to sleep after. Any error (a full
        disk, a database restarting) is ridden out: the step is retried, sooner at first, and the
        scheduler never exits for it (issue 12)."""
        close_old_connections()
        try:
            if self._reload.is_set():
                self._reload.clear()
                try:
                    self.reload()
                except Exception:
                    self._reload.set()  # the new config's schedules are synced at the next try
                    raise
            self.tick(self.clock())
            delay = self.sleep_for(self.clock())
        except Exception as exc:
            return self._down.failed(exc)
        self._down.recovered()
        return delay

    def sleep_for(self, now: datetime) -> float:
        """Until the earliest due run (so it fires on time), at most `service.tick_interval`."""
        tick = self.holder.get().config.service.tick_interval
        earliest = ScheduleEntry.objects.active().aggregate(at=Min("next_run_at"))["at"]
        if earliest is None:
            return tick
        return min(tick, max((earliest - now).total_seconds(), 0.0))

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()

    def reload_soon(self) -> None:
        """SIGHUP: the config is read again before the next tick (a failed read keeps the old)."""
        self._reload.set()
        self._wake.set()

    def reload(self) -> bool:
        try:
            self.holder.reload()
        except ConfigError as exc:
            log.error("config reload failed; keeping the running schedules: %s", exc)
            return False
        self.sync(self.clock())
        log.info("config reloaded: %d schedule entries", len(self.schedules))
        return True

    # -- config -> schedule_entries ----------------------------------------------------------

    def start(self, now: datetime) -> None:
        """A service start: sync, and re-arm `after:` one-shots, whose delay counts from each
        start ("one-shot delay from service start": a boot notification fires on every boot)."""
        self.sync(now)
        for (plugin, schedule_id), schedule in self.schedules.items():
            if schedule.kind is not Kind.AFTER:
                continue
            row = ScheduleEntry.objects.get(plugin=plugin, schedule_id=schedule_id)
            if row.status == ScheduleStatus.EXHAUSTED:
                row.resume(next_run_at=self._first(schedule, now), now=now)

    def sync(self, now: datetime) -> None:
        """Create rows for new entries, restart changed ones, and pause (with the reason) those
        whose plugin or command cannot run; a manual pause survives all of this."""
        runtime = self.holder.get()
        self.schedules = {(s.plugin, s.id): s for s in runtime.config.scheduled_entries()}
        rows = {(r.plugin, r.schedule_id): r for r in ScheduleEntry.objects.all()}
        for key, schedule in self.schedules.items():
            row = rows.get(key)
            print_ = fingerprint(schedule)
            problem = intake.refusal(runtime, schedule.plugin, schedule.command)
            if row is None:
                row = self._create(schedule, print_, now)
            elif row.fingerprint != print_:
                row.redefine(
                    command=schedule.command,
                    fingerprint=print_,
                    next_run_at=self._first(schedule, now, row),
                    now=now,
                )
            if problem and row.status != ScheduleStatus.PAUSED_MANUAL:
                if row.status != ScheduleStatus.PAUSED_INVALID or row.reason != problem:
                    row.pause(problem, manual=False, now=now)
                    log.warning("schedule %s paused: %s", row.address, problem)
            elif not problem and row.status == ScheduleStatus.PAUSED_INVALID:
                row.resume(next_run_at=self._first(schedule, now, row), now=now)
        for key, row in rows.items():
            if key not in self.schedules and row.status in (ScheduleStatus.ACTIVE, ScheduleStatus.PAUSED_INVALID):
                reason = f"no longer configured (plugin {row.plugin!r} removed, disabled or without this schedule)"
                if row.reason != reason:
                    row.pause(reason, manual=False, now=now)

    def _create(self, schedule: Schedule, print_: str, now: datetime) -> ScheduleEntry:
        return ScheduleEntry.objects.first_seen(
            schedule.plugin,
            schedule.id,
            command=schedule.command,
            fingerprint=print_,
            next_run_at=self._first(schedule, now),
            now=now,
        )

    def _first(self, schedule: Schedule, now: datetime, row: ScheduleEntry | None = None) -> datetime | None:
        last_success_at = row.last_success_at if row else None
        return first_due(schedule, now, started_at=self.started_at, last_success_at=last_success_at)

    # -- firing ------------------------------------------------------------------------------

    def tick(self, now: datetime) -> list[Fired]:
        self._record_outcomes(now)
        self._announce_breakers(now)
        self._pass_over_paused(now)
        due = []
        for row in ScheduleEntry.objects.due(now):
            schedule = self.schedules.get((row.plugin, row.schedule_id))
            if schedule is not None:  # else configured by another scheduler's newer config; ours syncs on reload
                due.append((schedule, row))
        fired: list[Fired] = []
        for start in range(0, len(due), FIRE_BATCH):
            # Each batch is stamped with its own start, not the tick's: a job's created_at (and the
            # entry's last_fired_at) then says when it was really enqueued, and a burst's batches
            # reach the workers' FIFO in due order. `max`: a clock behind `now` (tests) changes nothing.
            fired += self._fire_isolated(due[start : start + FIRE_BATCH], max(now, self.clock()))
        return fired

    def _fire_isolated(self, batch: list[tuple[Schedule, ScheduleEntry]], now: datetime) -> list[Fired]:
        """A batch fires in one transaction; if that fails, each of its entries is fired alone, so
        one entry that cannot fire (its error logged, retried next tick) never holds up the rest."""
        try:
            return self.fire(batch, now)
        except OperationalError:
            raise  # the database itself (full, locked, gone): one at a time would fail the same way
        except Exception:
            if len(batch) == 1:
                raise
            log.exception("firing %d due entries together failed; firing them one at a time", len(batch))
        fired = []
        for schedule, row in batch:
            try:
                fired += self.fire([(schedule, row)], now)
            except Exception:
                log.exception("schedule %s: firing failed; retried at the next tick", row.address)
        return fired

    def _plan(self, schedule: Schedule, row: ScheduleEntry, now: datetime) -> Due:
        """Which runs a due entry owes (pure): its due run, or after downtime what catch_up allows."""
        due = row.next_run_at
        assert due is not None
        if schedule.one_shot:
            return Due(row, schedule, due, [schedule.dedupe_key], None)
        if schedule.kind is Kind.EVERY:
            # Until this run ends (`_record_outcomes` then counts from its end), the next one is
            # an interval after this firing: a run still out by then meets if_running.
            following = every_run(schedule, now).due
            missed: tuple[str, ...] = ()
            if schedule.catch_up is not CatchUp.SKIP and overdue(schedule, due, now):
                since = row.last_fired_at or row.last_success_at
                missed = tuple(m.dedupe_key for m in catch_up(schedule, last_fired_at=since, now=now))
            return Due(row, schedule, due, list(missed or [schedule.dedupe_key]), following)
        after = next_run(schedule, due)
        assert after is not None
        if after.due > now:  # on time: the usual run
            return Due(row, schedule, due, [schedule.dedupe_key], after.due)
        # Downtime: more than one run is past due; catch_up decides which fire.
        upcoming = next_run(schedule, now)
        return Due(row, schedule, due, [schedule.dedupe_key], upcoming.due if upcoming else None)

    def fire(self, entries: Sequence[tuple[Schedule, ScheduleEntry]], now: datetime) -> list[Fired]:
        """Take these due entries' runs and enqueue what the policies allow, all in one
        transaction: a crash either fires a run and moves its entry on, or does neither."""
        planned = [self._plan(schedule, row, now) for schedule, row in entries]
        takes = [Take(d.row.pk, d.due_at, d.following, d.schedule.one_shot) for d in planned]
        fired: list[Fired] = []
        with writing():
            won = ScheduleEntry.objects.take(takes, now=now)
            batch = [d for d in planned if d.row.pk in won]  # the others another scheduler fired
            runtime = self.holder.get()
            gates = _Gates(runtime, batch, now)
            admitted: list[tuple[Due, list[JobSpec]]] = []
            skips: list[dict[str, Any]] = []
            for due in batch:
                runs, skip = gates.admit(due)
                if skip:
                    log.info("schedule %s: not enqueued: %s", due.row.address, skip.message)
                    fired.append(Fired(due.row.address, (), skipped=skip.message, reason=skip.reason))
                    skips.append(skipped_event(due, skip))
                else:
                    admitted.append((due, [self._job(due.schedule, key) for key in runs]))
            job_ids = iter(intake.submit_decided([spec for _, specs in admitted for spec in specs], now=now))
            last_jobs = {}
            for due, specs in admitted:
                ids = tuple(next(job_ids) for _ in specs)
                last_jobs[due.row.pk] = ids[-1]
                gates.sent(due, ids[0])
                fired.append(Fired(due.row.address, ids))
            ScheduleEntry.objects.record_fired(last_jobs, now=now)
            announce(runtime, skips, source=SOURCE, now=now)
        # At debug: the job's own line (dispatch) follows at info; two lines per scheduled job
        # were the bulk of a terminal's log (issue 36). tests/bench/bench_scheduler.py reads it.
        for result in fired:
            if result.job_ids:
                log.debug("schedule %s: enqueued %s", result.address, ", ".join(result.job_ids))
        return fired

    def _job(self, schedule: Schedule, dedupe_key: str) -> JobSpec:
        return intake.scheduled(
            self.holder.get(),
            schedule.plugin,
            schedule.command,
            thaw(schedule.payload),
            dedupe_key=dedupe_key,
            note=f"schedule {schedule.id}",
        )

    def _record_outcomes(self, now: datetime) -> None:
        """The workers record each job; an entry learns here how its last run ended (one read per
        tick, one batched write when there is something to learn). An `every` entry's next run is
        an interval after its last success ends (spec 000 §4.2); after a failure it runs again
        now, which the circuit breaker bounds, as the original does."""
        settled = []
        for outcome in ScheduleEntry.objects.unsettled():
            schedule = self.schedules.get((outcome.plugin, outcome.schedule_id))
            following = None
            if schedule is not None and schedule.kind is Kind.EVERY:
                following = every_run(schedule, outcome.ended_at).due if outcome.succeeded else now
            settled.append((outcome, following))
        ScheduleEntry.objects.settle(settled, now=now)

    def _pass_over_paused(self, now: datetime) -> None:
        """A run that comes while its entry is paused by hand is announced as skipped
        (`schedule_paused_manual`, the original's reason) and the entry's next run moves on, so
        each run is announced once; a resume computes the next run afresh."""
        passed = [
            (row, self.schedules[(row.plugin, row.schedule_id)])
            for row in ScheduleEntry.objects.passed_while_paused(now)
            if (row.plugin, row.schedule_id) in self.schedules
        ]
        if not passed:
            return
        skip = Skip("schedule_paused_manual", "the entry is paused (`schedule resume` starts it again)")
        with writing():
            events = []
            for row, schedule in passed:
                due = row.next_run_at
                assert due is not None
                following = self._following(schedule, now)
                if ScheduleEntry.objects.pass_over(row.pk, due, following, now=now):
                    events.append(skipped_event(Due(row, schedule, due, [], following), skip))
            announce(self.holder.get(), events, source=SOURCE, now=now)

    def _following(self, schedule: Schedule, now: datetime) -> datetime | None:
        """The run after one at `now` (none for a one-shot: a resume re-arms it)."""
        if schedule.one_shot:
            return None
        if schedule.kind is Kind.EVERY:
            return every_run(schedule, now).due
        run = next_run(schedule, now)
        return run.due if run else None

    def _announce_breakers(self, now: datetime) -> None:
        """`scheduler.circuit_half_open` and `scheduler.circuit_state_changed` for each breaker
        transition not yet announced (a worker's outcome, this scheduler's probe, an operator's
        reset), each claimed once however many schedulers share the database."""
        if not CircuitBreakerTransition.objects.unannounced().exists():
            return
        with writing():
            claimed = CircuitBreakerTransition.objects.claim_unannounced()
            announce(self.holder.get(), [breaker_event(t) for t in claimed], source=SOURCE, now=now)

    def _install_signal_handlers(self) -> None:
        def on_stop(signum: int, frame: FrameType | None) -> None:
            log.info("signal %s: stopping", signum)
            self.stop()

        def on_hup(signum: int, frame: FrameType | None) -> None:
            self.reload_soon()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)
