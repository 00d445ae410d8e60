"""The `runscheduler` daemon: keeps `schedule_entries` in step with the config and enqueues due
runs through the queue (spec 000 §4, "Scheduler"; ARCHITECTURE "Processes").

Each due run is taken by compare-and-set on the `next_run_at` it was read with, in the same
transaction that gates it (circuit breaker, if_running, poll guard) and enqueues it, so several
schedulers on one database fire a run exactly once and a crash never loses a taken run. Time is
passed in (`tick(now)`), so tests drive the clock and never sleep.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from types import FrameType

import blake3
from django.db import IntegrityError, close_old_connections, connections, transaction
from django.db.models import Exists, F, Min, OuterRef, Q
from django.utils import timezone

from gateway.config.errors import ConfigError
from gateway.config.frozen import thaw
from gateway.database import ensure_schema
from gateway.logs import logger
from gateway.runtime import Runtime, RuntimeHolder
from gateway.scheduler.spec import IfRunning, Kind, Schedule, scheduled_entries
from gateway.scheduler.timing import catch_up, next_run
from ledger.models import CircuitBreaker, Gate, Job, JobSpec, ScheduleEntry, ScheduleStatus
from ledger.states import JobStatus

log = logger("scheduler")

SUBMITTED_BY = "scheduler"
IN_FLIGHT = (JobStatus.QUEUED, JobStatus.RUNNING)


def fingerprint(schedule: Schedule) -> str:
    body = {f.name: getattr(schedule, f.name) for f in fields(schedule)}
    body["payload"] = thaw(schedule.payload)
    return blake3.blake3(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Fired:
    """What one tick did with one due entry (for logs, tests and `--once` output)."""

    address: str
    job_ids: tuple[str, ...]
    skipped: str | None = None


class Scheduler:
    def __init__(
        self,
        holder: RuntimeHolder,
        *,
        clock: Callable[[], datetime] = timezone.now,
        once: bool = False,
        install_signals: bool = True,
    ):
        self.holder = holder
        self.clock = clock
        self.once = once
        self.install_signals = install_signals
        self.started_at = clock()  # `after:` schedules count from here
        self.stopping = threading.Event()
        self._reload = threading.Event()
        self._wake = threading.Event()  # ends the sleep early: a stop or a reload
        self.schedules: dict[tuple[str, str], Schedule] = {}

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        ensure_schema()
        if self.install_signals:
            self._install_signal_handlers()
        self.start(self.clock())
        log.info("runscheduler started: %d schedule entries", len(self.schedules))
        try:
            while not self.stopping.is_set():
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload()
                close_old_connections()
                try:
                    self.tick(self.clock())
                except Exception:
                    # A database hiccup must not end the scheduler; the next tick retries.
                    log.exception("scheduler tick failed; retrying")
                if self.once:
                    break
                self._wake.wait(self.sleep_for(self.clock()))
                self._wake.clear()
        finally:
            connections.close_all()
            log.info("runscheduler stopped")
        return 0

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
        self.schedules = {(s.plugin, s.id): s for s in scheduled_entries(runtime.config)}
        rows = {(r.plugin, r.schedule_id): r for r in ScheduleEntry.objects.all()}
        for key, schedule in self.schedules.items():
            row = rows.get(key)
            print_ = fingerprint(schedule)
            problem = self._unrunnable(runtime, schedule)
            if row is None:
                row = self._create(schedule, print_, now)
            elif row.fingerprint != print_:
                row.redefine(
                    command=schedule.command, fingerprint=print_, next_run_at=self._first(schedule, now), now=now
                )
            if problem and row.status != ScheduleStatus.PAUSED_MANUAL:
                if row.status != ScheduleStatus.PAUSED_INVALID or row.reason != problem:
                    row.pause(problem, manual=False, now=now)
                    log.warning("schedule %s paused: %s", row.address, problem)
            elif not problem and row.status == ScheduleStatus.PAUSED_INVALID:
                row.resume(next_run_at=self._first(schedule, now), now=now)
        for key, row in rows.items():
            if key not in self.schedules and row.status in (ScheduleStatus.ACTIVE, ScheduleStatus.PAUSED_INVALID):
                reason = f"no longer configured (plugin {row.plugin!r} removed, disabled or without this schedule)"
                if row.reason != reason:
                    row.pause(reason, manual=False, now=now)

    def _create(self, schedule: Schedule, print_: str, now: datetime) -> ScheduleEntry:
        try:
            with transaction.atomic():
                return ScheduleEntry.objects.create(
                    plugin=schedule.plugin,
                    schedule_id=schedule.id,
                    command=schedule.command,
                    fingerprint=print_,
                    next_run_at=self._first(schedule, now),
                    created_at=now,
                    updated_at=now,
                )
        except IntegrityError:
            # Why: schedulers started together both find no row; the unique key lets one create
            # it and the other adopts that row (same config, same next run).
            return ScheduleEntry.objects.get(plugin=schedule.plugin, schedule_id=schedule.id)

    def _unrunnable(self, runtime: Runtime, schedule: Schedule) -> str | None:
        instance = runtime.registry.instances.get(schedule.plugin)
        if instance is None:
            why = runtime.registry.skipped.get(schedule.plugin, "not loaded")
            return f"plugin {schedule.plugin!r} is not loaded: {why}"
        if instance.command(schedule.command) is None:
            known = ", ".join(instance.manifest.commands)
            return f"plugin {schedule.plugin!r} has no command {schedule.command!r} (manifest declares: {known})"
        return None

    def _first(self, schedule: Schedule, now: datetime) -> datetime | None:
        run = next_run(schedule, now, started_at=self.started_at)
        return run.due if run else None

    # -- firing ------------------------------------------------------------------------------

    def tick(self, now: datetime) -> list[Fired]:
        self._record_successes()
        fired = []
        for row in ScheduleEntry.objects.due(now):
            schedule = self.schedules.get((row.plugin, row.schedule_id))
            if schedule is None:
                continue  # configured by another scheduler's newer config; ours will sync on reload
            result = self.fire(schedule, row, now)
            if result is not None:
                fired.append(result)
        return fired

    def fire(self, schedule: Schedule, row: ScheduleEntry, now: datetime) -> Fired | None:
        """Take the due run and enqueue what the policies allow, all in one transaction."""
        due = row.next_run_at
        assert due is not None
        if schedule.one_shot:
            runs, following = [(due, schedule.dedupe_key)], None
        else:
            after = next_run(schedule, due)
            assert after is not None
            if after.due > now:  # on time: the usual run
                runs, following = [(due, schedule.dedupe_key)], after.due
            else:  # downtime: more than one run is past due; catch_up decides which fire
                missed = catch_up(schedule, last_fired_at=due - timedelta(microseconds=1), now=now)
                runs = [(m.nominal, m.dedupe_key) for m in missed]
                upcoming = next_run(schedule, now)
                following = upcoming.due if upcoming else None
        with transaction.atomic():
            if not row.take(next_run_at=following, now=now, exhausted=schedule.one_shot):
                return None  # another scheduler fired this run
            if not runs:
                log.info("schedule %s: missed runs skipped (catch_up: skip)", row.address)
                return Fired(row.address, (), skipped="catch_up: skip")
            breaker = CircuitBreaker.locked(schedule.plugin, schedule.command)
            gate = self._gate(breaker, schedule, now)
            blocked = self._overlap(schedule, now) if gate != Gate.BLOCKED else f"circuit breaker {breaker.state}"
            if blocked:
                log.info("schedule %s: not enqueued: %s", row.address, blocked)
                return Fired(row.address, (), skipped=blocked)
            if gate == Gate.PROBE:
                runs = runs[:1]  # half-open lets exactly one job through
            job_ids = [self._enqueue(schedule, key, now) for _, key in runs]
            row.fired(job_ids[-1], now=now)
            if gate == Gate.PROBE:
                breaker.probe_sent(job_ids[0], now=now)
        log.info("schedule %s: enqueued %s", row.address, ", ".join(job_ids))
        return Fired(row.address, tuple(job_ids))

    def _gate(self, breaker: CircuitBreaker, schedule: Schedule, now: datetime) -> Gate:
        policy = self.holder.get().config.plugins[schedule.plugin].circuit_breaker
        probe = breaker.last_job_id
        probe_finished = probe is not None and Job.objects.filter(pk=probe).exclude(status__in=IN_FLIGHT).exists()
        return breaker.gate(reset_after=policy.reset_after, probe_finished=probe_finished, now=now)

    def _overlap(self, schedule: Schedule, now: datetime) -> str | None:
        """Why this run must wait for the previous ones (if_running, the poll guard), or None."""
        config = self.holder.get().config.plugins[schedule.plugin]
        if schedule.if_running is IfRunning.QUEUE:
            return None  # enqueued regardless; same-key run exclusion still runs them one at a time
        outstanding = Job.objects.filter(
            plugin=schedule.plugin, command=schedule.command, dedupe_key=schedule.dedupe_key, status__in=IN_FLIGHT
        )
        if schedule.if_running is IfRunning.SKIP and outstanding.exists():
            return "a previous run is still queued or running (if_running: skip)"
        if schedule.if_running is IfRunning.CANCEL:
            reason = f"cancelled by schedule {schedule.plugin}:{schedule.id} (if_running: cancel)"
            cancelled = Job.objects.cancel_queued([schedule.plugin], reason, now=now, dedupe_key=schedule.dedupe_key)
            if cancelled:
                log.info("schedule %s:%s cancelled %s", schedule.plugin, schedule.id, ", ".join(cancelled))
        if schedule.command == "poll":
            polls = Job.objects.filter(
                plugin=schedule.plugin, command="poll", submitted_by=SUBMITTED_BY, status__in=IN_FLIGHT
            ).count()
            if polls >= config.max_outstanding_polls:
                return f"{polls} scheduled poll(s) outstanding (max_outstanding_polls: {config.max_outstanding_polls})"
        return None

    def _enqueue(self, schedule: Schedule, dedupe_key: str, now: datetime) -> str:
        runtime = self.holder.get()
        config = runtime.config.plugins[schedule.plugin]
        spec = JobSpec(
            plugin=schedule.plugin,
            command=schedule.command,
            submitted_by=SUBMITTED_BY,
            payload=thaw(schedule.payload),
            dedupe_key=dedupe_key,
            dedupe_checked=True,
            max_attempts=config.retry.max_attempts,
            note=f"schedule {schedule.id}",
        )
        return Job.objects.enqueue(spec, default_dedupe_ttl=runtime.config.service.dedupe_ttl, now=now).job_id

    def _record_successes(self) -> None:
        """Carry each entry's latest succeeded run into `last_success_*` (the workers record the
        job; the schedule row learns of it here, one query per tick)."""
        unseen = Q(last_success_job_id=None) | ~Q(last_job_id=F("last_success_job_id"))
        # Only rows whose last job did succeed: a failed or still-queued one would be re-read on
        # every tick for nothing (28 ms a tick with 1,000 such entries, docs/performance.md).
        succeeded = Job.objects.filter(pk=OuterRef("last_job_id"), status=JobStatus.SUCCEEDED)
        rows = ScheduleEntry.objects.exclude(last_job_id=None).filter(unseen).filter(Exists(succeeded))
        pending = {r.last_job_id: r for r in rows}
        if not pending:
            return
        done = Job.objects.filter(pk__in=list(pending), status=JobStatus.SUCCEEDED).values_list("id", "completed_at")
        for job_id, completed_at in done:
            pending[job_id].succeeded(job_id, completed_at or timezone.now())

    def _install_signal_handlers(self) -> None:
        def on_stop(signum: int, frame: FrameType | None) -> None:
            log.info("signal %s: stopping", signum)
            self.stop()

        def on_hup(signum: int, frame: FrameType | None) -> None:
            self._reload.set()
            self._wake.set()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)
