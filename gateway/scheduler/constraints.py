"""`not_on` and `only_between`: which instants a schedule may run at, in its own time zone.

Spec 000 §4.2 and "Time Constraints": weekdays to skip and a local time window (start inclusive,
end exclusive, overnight allowed), both read on the local clock of the entry's `timezone`. An
instant is allowed when its local weekday is not excluded and its local time of day is inside the
window; the allowed instants form stretches, and the scheduler moves runs into them.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from itertools import pairwise

from gateway.config.schedules import Schedule

from .localtime import instants_reading, offset_at, transition_between

# How far ahead to look for the next change, widening only for rare configs (one allowed weekday
# whose window a daylight-saving jump swallows); validation refuses configs that are never allowed.
_HORIZONS_DAYS = (9, 60, 800)


def constrained(entry: Schedule) -> bool:
    return entry.only_between is not None or bool(entry.not_on)


def allowed(entry: Schedule, instant: datetime) -> bool:
    local = instant.astimezone(entry.timezone)
    if local.isoweekday() % 7 in entry.not_on:
        return False
    return entry.only_between is None or entry.only_between.contains(local.time())


def next_allowed(entry: Schedule, instant: datetime) -> datetime:
    """The first allowed instant at or after `instant`."""
    if allowed(entry, instant):
        return instant
    return _next_change(entry, instant, want=True)


def allowed_until(entry: Schedule, instant: datetime) -> datetime:
    """For an allowed `instant`: the end (exclusive) of the stretch of allowed time holding it."""
    return _next_change(entry, instant, want=False)


def _next_change(entry: Schedule, instant: datetime, *, want: bool) -> datetime:
    for days in _HORIZONS_DAYS:
        for point in _breakpoints(entry, instant, days):
            if allowed(entry, point) is want:
                return point
    raise ValueError(f"schedule {entry.plugin}:{entry.id} has no {'allowed' if want else 'disallowed'} time ahead")


def _breakpoints(entry: Schedule, since: datetime, days: int) -> list[datetime]:
    """Every instant after `since`, within `days`, at which `allowed` may change value.

    It changes only where the local clock crosses midnight or a window bound, or jumps. Both
    readings of each such wall time are taken (a repeated hour crosses its bounds twice) and every
    jump between them is added (a skipped bound is crossed at the jump); between consecutive points
    `allowed` is constant.
    """
    zone = entry.timezone
    walls = {time(0)}
    if entry.only_between is not None:
        walls |= {entry.only_between.start, entry.only_between.end}
    first_day = since.astimezone(zone).date() - timedelta(days=1)
    points: set[datetime] = set()
    for number in range(days + 2):
        day = first_day + timedelta(days=number)
        for wall in walls:
            points |= instants_reading(day, wall, zone)
    ordered = sorted(points)
    for before, after in pairwise(ordered):
        if offset_at(before, zone) != offset_at(after, zone):
            points.add(transition_between(before, after, zone))
    return sorted(point for point in points if point > since)
