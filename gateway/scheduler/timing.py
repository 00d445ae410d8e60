"""When a schedule entry runs: pure functions of the entry and instants passed in (timezone-aware;
results are UTC). No clock, no database: the scheduler loop stores what these compute.

Spec 000 §4.1-§4.3 and the "Scheduler" reference. The rules, where the spec leaves room:

* Every run has a *nominal* time, its slot in the schedule, and a *due* time, the nominal time
  plus that run's jitter offset. Runs come in order of both: a due time never passes the next
  run's, so "the first run due after X" is well defined and two schedulers agree on it.
* `every` runs on a fixed grid, so restarts and downtime never shift it (the spec's
  `last_successful_run + interval` read with the nominal time of the last run): whole days
  (`daily`, `weekly`, `3d`, `2w`) at local midnight in the entry's timezone, counted from Monday
  1970-01-05, so weekly runs fall on Mondays; `monthly` at local midnight on the 1st; anything
  shorter every `interval` exactly from 1970-01-05T00:00Z (`hourly` on the hour, `5m` on :00,
  :05, ...).
* `cron` is evaluated by croniter on the entry's local clock. A wall time skipped by a
  daylight-saving jump runs at the jump; a wall time that happens twice runs twice when the
  minute or hour field has `*` and once (the first time) otherwise, as Vixie cron does, so
  `30 2 * * *` runs once a day on both change days.
* `at` is its instant; `after` is `started_at` plus the delay. Either is exhausted once fired at
  or after its due time; until then it stays due, so downtime delays it rather than losing it.
* `not_on` / `only_between`: a run at a disallowed instant moves to the start of the next allowed
  stretch, unless that stretch has runs of its own (then they serve and the moved run is dropped).
  So `every: daily` with `only_between: 08:00-09:00` runs at 08:00, while `cron: 0 9 * * *` with
  `not_on: [sunday]` just skips Sundays.
* Jitter (spec §4.2: `random(-jitter/2, +jitter/2)`, fixed per run) is drawn from a BLAKE3 hash of
  plugin, schedule id and nominal time, so every scheduler and every restart computes the same
  offset. It is narrowed to the gaps to the neighbouring runs (keeping runs in order), and a
  jittered time outside the run's allowed stretch falls back to the nominal time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from blake3 import blake3

from gateway.config.schedules import CatchUp, Kind, Schedule

from .constraints import allowed, allowed_until, constrained, next_allowed
from .localtime import first_instant_at, is_repeat

# The spec's bound on run_all catch-up ("bounded to 100 runs").
CATCH_UP_LIMIT = 100
GRID_ORIGIN = datetime(1970, 1, 5, tzinfo=UTC)  # a Monday
_DAY = 86400
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
    """`every` and `cron`: the first run due strictly after `after` (the scheduler passes the due
    time of the run it just fired, or now). `at` and `after` (which needs `started_at`, the service
    start): the one run, until `last_fired_at` shows it fired; then None, exhausted."""
    _require_aware(after=after, started_at=started_at, last_fired_at=last_fired_at)
    if entry.one_shot:
        run = _one_shot(entry, started_at)
        return None if last_fired_at is not None and last_fired_at >= run.due else run
    # Runs are in due order and no due time is more than jitter/2 from its nominal time.
    return next(run for run in _runs_after(entry, after - entry.jitter) if run.due > after)


def catch_up(entry: Schedule, *, last_fired_at: datetime | None, now: datetime) -> tuple[CatchUpRun, ...]:
    """Runs missed between the last firing and `now` (due in (last_fired_at, now]) that the entry's
    `catch_up` policy fires now: none for skip, the first for run_once, the first 100 for run_all.
    Only `every` schedules catch up (spec "Catch-up Policy"); the loop resumes them at
    `next_run(entry, now)`."""
    _require_aware(last_fired_at=last_fired_at, now=now)
    if entry.kind is not Kind.EVERY or entry.catch_up is CatchUp.SKIP or last_fired_at is None:
        return ()
    limit = 1 if entry.catch_up is CatchUp.RUN_ONCE else CATCH_UP_LIMIT
    missed: list[CatchUpRun] = []
    for run in _runs_after(entry, last_fired_at - entry.jitter):
        if run.due <= last_fired_at:
            continue
        if run.due > now or len(missed) == limit:
            break
        missed.append(CatchUpRun(run.nominal, catch_up_dedupe_key(entry, run.nominal)))
    return tuple(missed)


def catch_up_dedupe_key(entry: Schedule, nominal: datetime) -> str:
    """Spec: catch-up jobs use a `catchup`-scoped key, one per missed run (the original's format)."""
    return f"{entry.dedupe_key}:catchup:{nominal.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


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


def _runs_after(entry: Schedule, cursor: datetime) -> Iterator[Run]:
    """The recurring entry's runs with nominal time after `cursor`, in order, without end."""
    while True:
        nominal = _slot_after(entry, cursor)
        if not constrained(entry) or allowed(entry, nominal):
            yield _jittered(entry, nominal, moved=False)
            cursor = nominal
            continue
        start = next_allowed(entry, nominal)
        own = _slot_after(entry, start - _TICK)
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
        bound = min(bound, nominal - _slot_before(entry, nominal), _slot_after(entry, nominal) - nominal)
    span = bound // _TICK
    digest = blake3(f"{entry.plugin}\x1f{entry.id}\x1f{nominal.isoformat()}".encode()).digest(length=8)
    due = nominal + (int.from_bytes(digest, "big") % span - span // 2) * _TICK
    if constrained(entry) and not _same_stretch(entry, nominal, due):
        return Run(nominal, nominal)
    return Run(nominal, due)


def _same_stretch(entry: Schedule, nominal: datetime, due: datetime) -> bool:
    if due >= nominal:
        return due < allowed_until(entry, nominal)
    return allowed(entry, due) and allowed_until(entry, due) > nominal


# -- the unconstrained slots of a recurring entry ---------------------------------------------


def _slot_after(entry: Schedule, instant: datetime) -> datetime:
    """The first slot strictly after `instant`."""
    if entry.cron is not None:
        return _cron_slot(entry, instant, forward=True)
    assert entry.every is not None
    if entry.every.months:
        return _calendar_slot(entry, instant, forward=True, months=entry.every.months)
    if entry.every.seconds % _DAY == 0:
        return _calendar_slot(entry, instant, forward=True, days=entry.every.seconds // _DAY)
    step = timedelta(seconds=entry.every.seconds)
    return GRID_ORIGIN + ((instant - GRID_ORIGIN) // step + 1) * step


def _slot_before(entry: Schedule, instant: datetime) -> datetime:
    """The last slot strictly before `instant`."""
    if entry.cron is not None:
        return _cron_slot(entry, instant, forward=False)
    assert entry.every is not None
    if entry.every.months:
        return _calendar_slot(entry, instant, forward=False, months=entry.every.months)
    if entry.every.seconds % _DAY == 0:
        return _calendar_slot(entry, instant, forward=False, days=entry.every.seconds // _DAY)
    step = timedelta(seconds=entry.every.seconds)
    return GRID_ORIGIN - ((GRID_ORIGIN - instant) // step + 1) * step


def _calendar_slot(entry: Schedule, instant: datetime, *, forward: bool, days: int = 0, months: int = 0) -> datetime:
    """Local midnights every `days` days from the grid origin's date, or on the 1st every `months`."""
    today = instant.astimezone(entry.timezone).date()
    if months:
        index = (today.year * 12 + today.month - 1) // months * months
    else:
        index = (today - GRID_ORIGIN.date()).days // days * days
    step = 1 if forward else -1
    if not forward:
        index += months or days  # start past `instant` and walk back
    while True:
        slot = first_instant_at(_grid_day(index, months), time(0), entry.timezone)
        if (slot > instant) if forward else (slot < instant):
            return slot
        index += step * (months or days)


def _grid_day(index: int, months: int) -> date:
    if months:
        year, month = divmod(index, 12)
        return date(year, month + 1, 1)
    return GRID_ORIGIN.date() + timedelta(days=index)


def _cron_slot(entry: Schedule, instant: datetime, *, forward: bool) -> datetime:
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
