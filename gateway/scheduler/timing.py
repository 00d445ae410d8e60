"""When a schedule entry runs: pure functions of the entry and instants passed in (timezone-aware;
results are UTC). No clock, no database: the scheduler loop stores what these compute.

Spec 000 §4.1-§4.3 and the "Scheduler" reference. The rules, where the spec leaves room:

* Every run has a *nominal* time, its slot in the schedule, and a *due* time, the nominal time
  plus that run's jitter offset.
* `every` counts from the last successful run (spec 000 §4.2: `next_run = last_successful_run +
  interval + random(-jitter/2, +jitter/2)`), as the original does: a new entry runs at once, each
  success schedules the next run an interval after it ended, and a run that fails is run again at
  the next tick (the circuit breaker bounds how often). `every_run(entry, anchor)` is the run an
  interval after `anchor`; the loop passes the last success's end, or the firing while its run
  is still out. Whole seconds are elapsed time (`daily` is 24 hours); `monthly` is the same local
  time a calendar month later.
* `cron` is evaluated by croniter on the entry's local clock. A wall time skipped by a
  daylight-saving jump runs at the jump; a wall time that happens twice runs twice when the
  minute or hour field has `*` and once (the first time) otherwise, as Vixie cron does, so
  `30 2 * * *` runs once a day on both change days. Runs come in order of both nominal and due
  time: a due time never passes the next run's, so "the first run due after X" is well defined.
* `at` is its instant; `after` is `started_at` plus the delay. Either is exhausted once fired at
  or after its due time; until then it stays due, so downtime delays it rather than losing it.
* `not_on` / `only_between`: a run at a disallowed instant moves to the start of the next allowed
  stretch (for cron, unless that stretch has runs of its own: then they serve and the moved run
  is dropped). So `every: daily` with `only_between: 08:00-09:00` runs at 08:00, while
  `cron: 0 9 * * *` with `not_on: [sunday]` just skips Sundays.
* Jitter (spec §4.2: `random(-jitter/2, +jitter/2)`, fixed per run) is drawn from a BLAKE3 hash of
  plugin, schedule id and the run's nominal time (for `every`, its anchor), so every scheduler
  and every restart computes the same offset. For cron it is narrowed to the gaps to the
  neighbouring runs (keeping runs in order); a jittered time outside the run's allowed stretch
  falls back to the nominal time.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from blake3 import blake3

from gateway.config.schedules import CatchUp, Kind, Schedule
from ledger.timestamps import rfc3339

from .constraints import allowed, allowed_until, constrained, next_allowed
from .localtime import first_instant_at, is_repeat

# The spec's bound on run_all catch-up ("bounded to 100 runs").
CATCH_UP_LIMIT = 100
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class Run:
    nominal: datetime  # the run's slot (after constraints moved it); identifies the run
    due: datetime  # nominal plus this run's jitter offset: when it fires


@dataclass(frozen=True)
class CatchUpRun:
    nominal: datetime
    dedupe_key: str


def next_run(
    entry: Schedule,
    after: datetime,
    *,
    started_at: datetime | None = None,
    last_fired_at: datetime | None = None,
) -> Run | None:
    """`cron`: the first run due strictly after `after` (the scheduler passes the due time of the
    run it just fired, or now). `at` and `after` (which needs `started_at`, the service start):
    the one run, until `last_fired_at` shows it fired; then None, exhausted. `every` counts from
    its runs, not from a calendar: see `every_run`."""
    _require_aware(after=after, started_at=started_at, last_fired_at=last_fired_at)
    if entry.one_shot:
        run = _one_shot(entry, started_at)
        return None if last_fired_at is not None and last_fired_at >= run.due else run
    if entry.kind is Kind.EVERY:
        raise ValueError(f"schedule {entry.plugin}:{entry.id} is an every schedule: use every_run")
    # Runs are in due order and no due time is more than jitter/2 from its nominal time.
    return next(run for run in _cron_runs_after(entry, after - entry.jitter) if run.due > after)


def every_run(entry: Schedule, anchor: datetime) -> Run:
    """`every`: the run one interval after `anchor` (the end of the last successful run, or the
    firing of a run still out), moved into the allowed time, with its jitter."""
    _require_aware(anchor=anchor)
    nominal = _plus_intervals(entry, anchor, 1)
    moved = constrained(entry) and not allowed(entry, nominal)
    if moved:
        nominal = next_allowed(entry, nominal)
    due = nominal + _offset(entry, anchor, entry.jitter)
    if constrained(entry) and not _same_stretch(entry, nominal, due):
        due = nominal
    return Run(nominal, due)


def catch_up(entry: Schedule, *, last_fired_at: datetime | None, now: datetime) -> tuple[CatchUpRun, ...]:
    """Runs missed between the last firing and `now`: the slots an interval, two intervals, ...
    after `last_fired_at` up to `now` that the constraints allow, as many as the entry's
    `catch_up` policy fires (none for skip, the first for run_once, the first 100 for run_all).
    Only `every` schedules catch up (spec "Catch-up Policy")."""
    _require_aware(last_fired_at=last_fired_at, now=now)
    if entry.kind is not Kind.EVERY or entry.catch_up is CatchUp.SKIP or last_fired_at is None:
        return ()
    limit = 1 if entry.catch_up is CatchUp.RUN_ONCE else CATCH_UP_LIMIT
    missed: list[CatchUpRun] = []
    count = 1
    while len(missed) < limit:
        slot = _plus_intervals(entry, last_fired_at, count)
        if slot > now:
            break
        if not constrained(entry) or allowed(entry, slot):
            missed.append(CatchUpRun(slot, catch_up_dedupe_key(entry, slot)))
        count += 1
    return tuple(missed)


def first_due(
    entry: Schedule, now: datetime, *, started_at: datetime | None, last_success_at: datetime | None
) -> datetime | None:
    """Where an entry's runs (re)start when it is first seen, redefined or resumed: `every` an
    interval after its last success, or now when it has none or that time has passed (what was
    missed meanwhile is not caught up); the others at their next run after now."""
    if entry.kind is Kind.EVERY:
        due = now if last_success_at is None else max(now, every_run(entry, last_success_at).due)
        # "At once" waits for the allowed time: a `not_on: [saturday, sunday]` entry first seen on
        # a Saturday runs on Monday, not now.
        return next_allowed(entry, due) if constrained(entry) and not allowed(entry, due) else due
    run = next_run(entry, now, started_at=started_at)
    return run.due if run else None


def overdue(entry: Schedule, due: datetime, now: datetime) -> bool:
    """Whether an `every` run due at `due` is a whole interval or more late at `now`: the
    scheduler was down (or the entry paused) through at least one run."""
    return _plus_intervals(entry, due, 1) <= now


def catch_up_dedupe_key(entry: Schedule, nominal: datetime) -> str:
    """Spec: catch-up jobs use a `catchup`-scoped key, one per missed run (the original's format)."""
    return f"{entry.dedupe_key}:catchup:{rfc3339(nominal, 'seconds')}"


def _plus_intervals(entry: Schedule, instant: datetime, count: int) -> datetime:
    assert entry.every is not None
    if not entry.every.months:
        return instant.astimezone(UTC) + count * timedelta(seconds=entry.every.seconds)
    # A calendar month: the same local wall time, on the same day or the month's last.
    local = instant.astimezone(entry.timezone)
    year, month = divmod(local.month - 1 + count * entry.every.months, 12)
    year += local.year
    day = date(year, month + 1, min(local.day, calendar.monthrange(year, month + 1)[1]))
    return first_instant_at(day, local.time(), entry.timezone)


def _one_shot(entry: Schedule, started_at: datetime | None) -> Run:
    if entry.at is not None:
        nominal = entry.at
    else:
        if started_at is None or entry.after is None:
            raise ValueError(f"schedule {entry.plugin}:{entry.id} runs `after` service start: pass started_at")
        nominal = started_at.astimezone(UTC) + entry.after
    if constrained(entry):
        nominal = next_allowed(entry, nominal)
    return Run(nominal, nominal)


def _cron_runs_after(entry: Schedule, cursor: datetime) -> Iterator[Run]:
    """The cron entry's runs with nominal time after `cursor`, in order, without end."""
    while True:
        nominal = _cron_slot(entry, cursor, forward=True)
        if not constrained(entry) or allowed(entry, nominal):
            yield _jittered(entry, nominal, moved=False)
            cursor = nominal
            continue
        start = next_allowed(entry, nominal)
        own = _cron_slot(entry, start - _TICK, forward=True)
        if own < allowed_until(entry, start):
            cursor = start - _TICK
            continue
        yield _jittered(entry, start, moved=True)
        cursor = start


def _jittered(entry: Schedule, nominal: datetime, *, moved: bool) -> Run:
    bound = entry.jitter
    if not bound:
        return Run(nominal, nominal)
    if not moved:
        # A moved run is alone in its stretch; the others keep clear of their neighbours.
        before, after = _cron_slot(entry, nominal, forward=False), _cron_slot(entry, nominal, forward=True)
        bound = min(bound, nominal - before, after - nominal)
    due = nominal + _offset(entry, nominal, bound)
    if constrained(entry) and not _same_stretch(entry, nominal, due):
        return Run(nominal, nominal)
    return Run(nominal, due)


def _offset(entry: Schedule, key: datetime, bound: timedelta) -> timedelta:
    """This run's jitter in [-bound/2, +bound/2), fixed by a hash of the entry and `key`."""
    span = bound // _TICK
    if not span:
        return timedelta(0)
    digest = blake3(f"{entry.plugin}\x1f{entry.id}\x1f{key.isoformat()}".encode()).digest(length=8)
    return (int.from_bytes(digest, "big") % span - span // 2) * _TICK


def _same_stretch(entry: Schedule, nominal: datetime, due: datetime) -> bool:
    if due >= nominal:
        return due < allowed_until(entry, nominal)
    return allowed(entry, due) and allowed_until(entry, due) > nominal


def _cron_slot(entry: Schedule, instant: datetime, *, forward: bool) -> datetime:
    """The first cron slot strictly after `instant` (or the last strictly before it)."""
    assert entry.cron is not None
    minute, hour = entry.cron.split()[:2]
    runs_once_per_wall_time = "*" not in minute and "*" not in hour
    from croniter import croniter  # only for cron entries: see gateway.config.schedules, _cron

    matches = croniter(entry.cron, instant.astimezone(entry.timezone))
    while True:
        slot: datetime = matches.get_next(datetime) if forward else matches.get_prev(datetime)
        if not (runs_once_per_wall_time and is_repeat(slot, entry.timezone)):
            return slot.astimezone(UTC)


def _require_aware(**instants: datetime | None) -> None:
    for name, value in instants.items():
        if value is not None and value.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware, got {value!r}")
