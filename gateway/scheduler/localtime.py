"""Local wall-clock times as instants in one IANA zone, across daylight-saving changes.

When the clocks go back a wall time happens twice; when they go forward some wall times never
happen. Schedules and windows are written in wall time, so these helpers say which instants a wall
time names. All instants returned are UTC.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

_SECOND = timedelta(seconds=1)


def first_instant_at(day: date, wall: time, zone: ZoneInfo) -> datetime:
    """The first instant the clock in `zone` reads `day` `wall` or later: the wall time itself (its
    first occurrence when the clocks go back) or, when the clocks jump over it, the jump."""
    local = datetime.combine(day, wall, tzinfo=zone)
    instant = local.astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == local.replace(tzinfo=None):
        return instant
    # Skipped: fold=1 reads it with the offset after the jump, fold=0 with the one before, and
    # the jump lies between the two.
    return transition_between(local.replace(fold=1).astimezone(UTC), instant, zone)


def instants_reading(day: date, wall: time, zone: ZoneInfo) -> set[datetime]:
    """Both readings of a wall time (one instant when it happens once; for a skipped wall time,
    two instants on either side of the jump)."""
    local = datetime.combine(day, wall, tzinfo=zone)
    return {local.astimezone(UTC), local.replace(fold=1).astimezone(UTC)}


def is_repeat(instant: datetime, zone: ZoneInfo) -> bool:
    """Whether `instant` is the second time its wall time happens (the clocks went back)."""
    local = instant.astimezone(zone)
    first = local.replace(tzinfo=None).replace(tzinfo=zone, fold=0)
    return first.astimezone(UTC) != instant.astimezone(UTC)


def offset_at(instant: datetime, zone: ZoneInfo) -> timedelta | None:
    return instant.astimezone(zone).utcoffset()


def transition_between(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in (`before`, `after`] already on `after`'s UTC offset. Offsets change on
    whole seconds, so a binary search over seconds finds it exactly."""
    target = offset_at(after, zone)
    low, high = 0, (after - before) // _SECOND
    while low < high:
        middle = (low + high) // 2
        if offset_at(before + middle * _SECOND, zone) == target:
            high = middle
        else:
            low = middle + 1
    return before + low * _SECOND
