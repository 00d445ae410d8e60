"""When schedule entries run: pure functions of the entry and the instants passed in.

Spec 000 §4.1-§4.3 and the "Scheduler" reference ("Time Constraints", "Catch-up Policy", "State
Tracking": one-shots exhausted after firing), RFC-002 §17 (jitter fixed per run). Every expected
instant below is worked out by hand from the calendar, noted next to it; none is read back from
the implementation. Australia/Sydney is UTC+10 (AEST) in winter and UTC+11 (AEDT) in summer:
daylight saving ends on Sunday 5 April 2026 at 03:00 AEDT (clocks back to 02:00 AEST, 16:00Z)
and starts on Sunday 5 October 2025 at 02:00 AEST (clocks forward to 03:00 AEDT, 16:00Z).
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config.errors import ConfigProblem
from gateway.config.schedules import Schedule, parse_schedules
from gateway.config.yamlsrc import KeyPath, dotted
from gateway.scheduler.constraints import allowed_until, next_allowed
from gateway.scheduler.timing import (
    CATCH_UP_LIMIT,
    CatchUpRun,
    Run,
    catch_up,
    every_run,
    first_due,
    next_run,
    overdue,
)

SYDNEY = ZoneInfo("Australia/Sydney")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, microsecond: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=UTC)


def entry(plugin: str = "echo", **raw: Any) -> Schedule:
    def problem_at(path: KeyPath, message: str) -> ConfigProblem:
        return ConfigProblem(message, key=dotted(path))

    parsed = parse_schedules(plugin, [raw], problem_at)
    assert parsed.problems == (), [str(p) for p in parsed.problems]
    return parsed.entries[0]


def runs(schedule: Schedule, after: datetime, count: int) -> list[Run]:
    """The next `count` cron runs, chained as the scheduler chains them: each after the last one's due time."""
    out: list[Run] = []
    for _ in range(count):
        run = next_run(schedule, after)
        assert run is not None
        out.append(run)
        after = run.due
    return out


def dues(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    return [run.due for run in runs(schedule, after, count)]


# -- every: an interval from its anchor (the last success's end, or the firing) -----------------


def test_every_runs_an_interval_after_its_anchor_not_on_a_wall_clock_grid() -> None:
    """Item 102: `every: 7m` anchored at 06:11:37 runs at 06:18:37, not at 06:14:00."""
    assert every_run(entry(every="7m"), utc(2026, 11, 28, 6, 11, 37)) == Run(
        utc(2026, 11, 28, 6, 18, 37), utc(2026, 11, 28, 6, 18, 37)
    )
    assert every_run(entry(every="5m"), utc(2026, 5, 1, 10, 2, 17)).due == utc(2026, 5, 1, 10, 7, 17)
    assert every_run(entry(every="hourly"), utc(2026, 5, 1, 10, 0, 0, 1)).due == utc(2026, 5, 1, 11, 0, 0, 1)


def test_daily_and_weekly_are_elapsed_time_from_the_anchor_not_midnight() -> None:
    # `daily` is not UTC (or local) midnight: 24 hours after the last success.
    assert every_run(entry(every="daily"), utc(2026, 11, 28, 6, 11, 37)).due == utc(2026, 11, 29, 6, 11, 37)
    assert every_run(entry(every="weekly"), utc(2026, 5, 1, 12)).due == utc(2026, 5, 8, 12)
    assert every_run(entry(every="2w"), utc(2026, 1, 5)).due == utc(2026, 1, 19)


def test_monthly_is_the_same_local_time_a_calendar_month_later() -> None:
    monthly = entry(every="monthly", timezone="Australia/Sydney")
    # 10:00 AEDT on 31 January -> 10:00 AEDT on 28 February (the month's last day).
    assert every_run(monthly, utc(2026, 1, 30, 23)).due == utc(2026, 2, 27, 23)
    # 10:00 AEDT on 15 March -> 10:00 AEST on 15 April, across the April change.
    assert every_run(monthly, utc(2026, 3, 14, 23)).due == utc(2026, 4, 15, 0)


def test_first_due_is_now_without_a_success_and_an_interval_after_the_last_one() -> None:
    five = entry(every="5m")
    now = utc(2026, 5, 1, 10, 2, 17)
    assert first_due(five, now, started_at=now, last_success_at=None) == now  # a new entry runs at once
    assert first_due(five, now, started_at=now, last_success_at=utc(2026, 5, 1, 10)) == utc(2026, 5, 1, 10, 5)
    # Long after: now, not a burst of the runs missed meanwhile.
    assert first_due(five, now, started_at=now, last_success_at=utc(2026, 5, 1, 8)) == now
    assert first_due(entry(cron="0 11 * * *"), now, started_at=now, last_success_at=None) == utc(2026, 5, 1, 11)


def test_a_first_run_at_once_waits_for_the_allowed_time() -> None:
    # Before: a weekday entry first seen on Saturday 2026-11-28 was due at once, on the Saturday.
    weekdays = entry(every="1h", not_on=["saturday", "sunday"], timezone="UTC")
    saturday = utc(2026, 11, 28, 12, 33)
    assert first_due(weekdays, saturday, started_at=saturday, last_success_at=None) == utc(2026, 11, 30)
    assert first_due(weekdays, saturday, started_at=saturday, last_success_at=utc(2026, 11, 27, 9)) == utc(2026, 11, 30)
    office = entry(every="5m", only_between="08:00-18:00", timezone="UTC")
    evening = utc(2026, 11, 26, 20)
    assert first_due(office, evening, started_at=evening, last_success_at=None) == utc(2026, 11, 27, 8)
    assert first_due(office, utc(2026, 11, 26, 9), started_at=None, last_success_at=None) == utc(2026, 11, 26, 9)


def test_overdue_means_a_whole_interval_late() -> None:
    five = entry(every="5m")
    assert not overdue(five, utc(2026, 5, 1, 10), utc(2026, 5, 1, 10, 4, 59))
    assert overdue(five, utc(2026, 5, 1, 10), utc(2026, 5, 1, 10, 5))


# -- cron in the entry's timezone, across both daylight-saving changes ---------------------------


def test_cron_weekdays_9am_sydney_keeps_local_time_as_the_clocks_go_forward() -> None:
    """The reference's "Cron with timezone" example across 5 October 2025."""
    weekdays = entry(id="weekdays-9am", cron="0 9 * * 1-5", timezone="Australia/Sydney")
    assert dues(weekdays, utc(2025, 10, 2, 12), 3) == [
        utc(2025, 10, 2, 23),  # Friday 3 October 09:00 AEST
        utc(2025, 10, 5, 22),  # Monday 6 October 09:00 AEDT
        utc(2025, 10, 6, 22),  # Tuesday
    ]


def test_cron_weekdays_9am_sydney_keeps_local_time_as_the_clocks_go_back() -> None:
    weekdays = entry(cron="0 9 * * 1-5", timezone="Australia/Sydney")
    assert dues(weekdays, utc(2026, 4, 2, 12), 2) == [
        utc(2026, 4, 2, 22),  # Friday 3 April 09:00 AEDT
        utc(2026, 4, 5, 23),  # Monday 6 April 09:00 AEST
    ]


def test_cron_at_a_skipped_wall_time_runs_at_the_jump_in_october() -> None:
    nightly = entry(cron="30 2 * * *", timezone="Australia/Sydney")
    assert dues(nightly, utc(2025, 10, 3, 12), 3) == [
        utc(2025, 10, 3, 16, 30),  # Saturday 4 October 02:30 AEST
        utc(2025, 10, 4, 16),  # Sunday 5 October: 02:30 never happens; clocks reach 03:00 AEDT at 16:00Z
        utc(2025, 10, 5, 15, 30),  # Monday 6 October 02:30 AEDT
    ]


def test_cron_at_a_repeated_wall_time_runs_once_in_april() -> None:
    nightly = entry(cron="30 2 * * *", timezone="Australia/Sydney")
    assert dues(nightly, utc(2026, 4, 3, 12), 3) == [
        utc(2026, 4, 3, 15, 30),  # Saturday 4 April 02:30 AEDT
        utc(2026, 4, 4, 15, 30),  # Sunday 5 April 02:30 AEDT, the first time; not again at 02:30 AEST (16:30Z)
        utc(2026, 4, 5, 16, 30),  # Monday 6 April 02:30 AEST
    ]


def test_cron_with_wildcard_minutes_runs_through_both_passes_of_the_repeated_hour() -> None:
    half_hourly = entry(cron="*/30 * * * *", timezone="Australia/Sydney")
    assert dues(half_hourly, utc(2026, 4, 4, 14), 6) == [
        utc(2026, 4, 4, 14, 30),  # 01:30 AEDT
        utc(2026, 4, 4, 15),  # 02:00 AEDT
        utc(2026, 4, 4, 15, 30),  # 02:30 AEDT
        utc(2026, 4, 4, 16),  # 02:00 AEST (clocks went back)
        utc(2026, 4, 4, 16, 30),  # 02:30 AEST
        utc(2026, 4, 4, 17),  # 03:00 AEST
    ]


def test_cron_with_wildcard_minutes_skips_the_missing_hour_in_october_without_a_burst() -> None:
    half_hourly = entry(cron="*/30 * * * *", timezone="Australia/Sydney")
    assert dues(half_hourly, utc(2025, 10, 4, 14, 45), 4) == [
        utc(2025, 10, 4, 15),  # 01:00 AEST
        utc(2025, 10, 4, 15, 30),  # 01:30 AEST
        utc(2025, 10, 4, 16),  # 03:00 AEDT: 02:00 and 02:30 never happen, and run once here, not thrice
        utc(2025, 10, 4, 16, 30),  # 03:30 AEDT
    ]


def test_an_explicit_timezone_wins_over_the_hosts() -> None:
    # Whatever the host's zone, 07:00 in Sydney (UTC+10 in May) is 21:00Z.
    assert dues(entry(cron="0 7 * * *", timezone="Australia/Sydney"), utc(2026, 5, 1, 7), 1) == [utc(2026, 5, 1, 21)]


# -- only_between and not_on, in the entry's timezone ------------------------------------------


def test_an_overnight_window_runs_from_its_start_until_just_before_its_end() -> None:
    nightly = entry(cron="0 * * * *", only_between="22:00-06:00", timezone="UTC")
    assert dues(nightly, utc(2026, 5, 1, 4, 30), 4) == [
        utc(2026, 5, 1, 5),
        utc(2026, 5, 1, 22),  # 06:00 is the end, excluded; 22:00 is the start, included
        utc(2026, 5, 1, 23),
        utc(2026, 5, 2, 0),
    ]


def test_an_overnight_window_is_read_on_the_local_clock() -> None:
    # Sydney in May is UTC+10: local 22:00 is 12:00Z and 02:00 is 16:00Z.
    nightly = entry(cron="0 * * * *", only_between="22:00-02:00", timezone="Australia/Sydney")
    assert dues(nightly, utc(2026, 5, 1, 11, 30), 5) == [
        utc(2026, 5, 1, 12),
        utc(2026, 5, 1, 13),
        utc(2026, 5, 1, 14),
        utc(2026, 5, 1, 15),
        utc(2026, 5, 2, 12),
    ]


def test_a_day_window_excludes_its_end_and_includes_its_start_next_day() -> None:
    office = entry(cron="*/5 * * * *", only_between="08:00-18:00", timezone="UTC")
    assert dues(office, utc(2026, 5, 1, 17, 50), 3) == [
        utc(2026, 5, 1, 17, 55),
        utc(2026, 5, 2, 8),
        utc(2026, 5, 2, 8, 5),
    ]


def test_a_run_outside_the_window_moves_to_the_window_start() -> None:
    """`every: daily` last succeeded at 23:00: the next run moves to 08:00 rather than being lost."""
    morning = entry(every="daily", only_between="08:00-09:00", timezone="Australia/Sydney")
    # 23:00 AEDT Friday 3 April + 24 h = 23:00 AEDT Saturday, outside the window: the next allowed
    # instant is 08:00 AEST Sunday 5 April (the clocks went back at 03:00), 22:00Z Saturday.
    assert every_run(morning, utc(2026, 4, 3, 12)) == Run(utc(2026, 4, 4, 22), utc(2026, 4, 4, 22))
    # Inside the window the interval is kept: 08:30 the next day.
    assert every_run(morning, utc(2026, 4, 5, 22, 30)).due == utc(2026, 4, 6, 22, 30)


def test_runs_piling_up_outside_a_short_window_collapse_into_one_at_its_start() -> None:
    brief = entry(cron="0 * * * *", only_between="09:30-09:45", timezone="UTC")
    assert dues(brief, utc(2026, 5, 1, 9, 40), 2) == [utc(2026, 5, 2, 9, 30), utc(2026, 5, 3, 9, 30)]


def test_not_on_skips_the_days_without_adding_a_run_at_the_next_midnight() -> None:
    """The cookbook's morning ping: weekdays at 09:00, nothing at Monday 00:00."""
    ping = entry(id="morning-ping", cron="0 9 * * *", not_on=["saturday", "sunday"], timezone="UTC")
    # Friday 1 May 2026, after the ping.
    assert dues(ping, utc(2026, 5, 1, 10), 2) == [utc(2026, 5, 4, 9), utc(2026, 5, 5, 9)]


@pytest.mark.parametrize("not_on", [["saturday", "sunday"], ["sat", 7], [6, 0], ["SUN", 6]])
def test_not_on_names_and_numbers_including_7_mean_the_same_days(not_on: list[object]) -> None:
    daily = entry(every="daily", not_on=not_on, timezone="UTC")
    # Friday 1 May + 1 day is a Saturday: moved to Monday 00:00; then a day at a time.
    assert every_run(daily, utc(2026, 5, 1)).due == utc(2026, 5, 4)
    assert every_run(daily, utc(2026, 5, 4)).due == utc(2026, 5, 5)


def test_not_on_reads_the_weekday_on_the_local_clock() -> None:
    # 09:00 Monday in Sydney (UTC+10 in May) is 23:00Z on Sunday: a Monday run, skipped.
    ping = entry(cron="0 9 * * *", timezone="Australia/Sydney", not_on=["monday"])
    assert dues(ping, utc(2026, 5, 2, 12), 2) == [utc(2026, 5, 2, 23), utc(2026, 5, 4, 23)]


def test_a_window_inside_the_repeated_hour_is_open_twice_and_one_swallowed_by_the_jump_not_at_all() -> None:
    window = {"cron": "*/10 * * * *", "only_between": "02:00-02:20", "timezone": "Australia/Sydney"}
    assert dues(entry(**window), utc(2026, 4, 4, 14, 50), 5) == [
        utc(2026, 4, 4, 15),  # 02:00 AEDT
        utc(2026, 4, 4, 15, 10),
        utc(2026, 4, 4, 16),  # 02:00 AEST, the second pass
        utc(2026, 4, 4, 16, 10),
        utc(2026, 4, 5, 16),  # Monday 02:00 AEST
    ]
    # 5 October 2025 has no 02:00-02:20: the next window is Monday 6 October, 02:00 AEDT.
    assert dues(entry(**window), utc(2025, 10, 4, 14, 50), 1) == [utc(2025, 10, 5, 15)]


_WINDOWS = ["02:00-03:00", "02:30-05:00", "22:00-02:30", "01:15-02:45", "09:00-17:00"]
_NOT_ON = [[], ["sunday"], ["saturday", "sunday"], [1, 2, 3, 4, 5]]


@settings(max_examples=150, deadline=None)
@given(
    window=st.sampled_from([None, *_WINDOWS]),
    not_on=st.sampled_from(_NOT_ON),
    minute=st.integers(min_value=0, max_value=14 * 1440),
    april=st.booleans(),
)
def test_next_allowed_and_stretch_end_match_a_minute_by_minute_scan_around_both_changes(
    window: str | None, not_on: list[object], minute: int, april: bool
) -> None:
    """The stretch engine against a plain scan of the local clock, a minute at a time."""
    if window is None and not not_on:
        return
    raw: dict[str, Any] = {"every": "5m", "timezone": "Australia/Sydney", "not_on": not_on}
    if window:
        raw["only_between"] = window
    schedule = entry(**raw)
    start = (utc(2026, 3, 29) if april else utc(2025, 9, 28)) + timedelta(minutes=minute)

    def ok(instant: datetime) -> bool:
        local = instant.astimezone(SYDNEY)
        if local.strftime("%A").lower() in [str(d).lower() for d in not_on] or local.isoweekday() in not_on:
            return False
        if window is None:
            return True
        begin, end = (tuple(map(int, part.split(":"))) for part in window.split("-"))
        now = (local.hour, local.minute)
        return begin <= now < end if begin < end else now >= begin or now < end

    scan = start
    while not ok(scan):
        scan += timedelta(minutes=1)
    assert next_allowed(schedule, start) == scan
    end = scan + timedelta(minutes=1)
    while ok(end):
        end += timedelta(minutes=1)
    assert allowed_until(schedule, scan) == end


# -- at and after: one shot, exhausted once fired -------------------------------------------------


def test_at_runs_once_at_its_time_and_is_exhausted_after_firing() -> None:
    once = entry(id="send-once", at="2026-03-15T14:00:00Z")
    due = Run(utc(2026, 3, 15, 14), utc(2026, 3, 15, 14))
    assert next_run(once, utc(2026, 3, 1)) == due
    # Not fired yet, though its time has passed (the gateway was down): still due, not lost.
    assert next_run(once, utc(2026, 3, 15, 18)) == due
    assert next_run(once, utc(2026, 3, 15, 14, 0, 1), last_fired_at=utc(2026, 3, 15, 14, 0, 0, 400000)) is None
    assert next_run(once, utc(2026, 4, 1), last_fired_at=utc(2026, 3, 15, 14)) is None


def test_an_at_moved_to_a_later_time_is_due_again() -> None:
    """Exhaustion is "fired at or after its time": a new `at` under the same id re-arms it."""
    moved = entry(id="send-once", at="2026-03-20T09:00:00Z")
    assert next_run(moved, utc(2026, 3, 16), last_fired_at=utc(2026, 3, 15, 14)) == Run(
        utc(2026, 3, 20, 9), utc(2026, 3, 20, 9)
    )


def test_at_on_an_excluded_day_moves_to_the_next_allowed_instant() -> None:
    # Saturday 2 May 2026 -> Monday 4 May 00:00 UTC.
    weekend = entry(at="2026-05-02T10:00:00Z", not_on=["saturday", "sunday"])
    assert next_run(weekend, utc(2026, 5, 1)) == Run(utc(2026, 5, 4), utc(2026, 5, 4))


def test_after_runs_once_that_long_after_service_start_and_is_exhausted_after_firing() -> None:
    boot = entry(id="boot-notify", after="30s")
    started = utc(2026, 5, 1, 10)
    assert next_run(boot, started, started_at=started) == Run(utc(2026, 5, 1, 10, 0, 30), utc(2026, 5, 1, 10, 0, 30))
    fired = utc(2026, 5, 1, 10, 0, 30, 200000)
    assert next_run(boot, fired, started_at=started, last_fired_at=fired) is None


def test_after_counts_from_each_service_start() -> None:
    """The cookbook's startup notification: a restart is a new start, and its run is due again."""
    boot = entry(id="boot-notify", after="30s")
    restarted = utc(2026, 5, 1, 11)
    assert next_run(boot, restarted, started_at=restarted, last_fired_at=utc(2026, 5, 1, 10, 0, 30)) == Run(
        utc(2026, 5, 1, 11, 0, 30), utc(2026, 5, 1, 11, 0, 30)
    )


def test_after_needs_the_service_start() -> None:
    with pytest.raises(ValueError, match="started_at"):
        next_run(entry(after="30s"), utc(2026, 5, 1))


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        every_run(entry(every="5m"), datetime(2026, 5, 1, 10))
    with pytest.raises(ValueError, match="timezone-aware"):
        next_run(entry(cron="0 * * * *"), datetime(2026, 5, 1, 10))
    with pytest.raises(ValueError, match="timezone-aware"):
        catch_up(entry(every="5m", catch_up="run_all"), last_fired_at=utc(2026, 5, 1), now=datetime(2026, 5, 2))


# -- catch-up after a 3-hour downtime --------------------------------------------------------------

# Last fired at the 09:00 run (a little after it was due); back at noon.
LAST_FIRED = utc(2026, 5, 1, 9, 0, 0, 300000)
BACK = utc(2026, 5, 1, 12, 0, 0, 500000)


def catchups(**raw: Any) -> tuple[CatchUpRun, ...]:
    return catch_up(entry(**raw), last_fired_at=LAST_FIRED, now=BACK)


@pytest.mark.parametrize("every", ["5m", "15m"])
def test_catch_up_skip_fires_nothing(every: str) -> None:
    assert catchups(every=every) == ()
    assert catchups(every=every, catch_up="skip") == ()


def test_catch_up_run_once_fires_one_run_for_the_first_missed_slot_with_a_catchup_key() -> None:
    assert catchups(every="5m", catch_up="run_once") == (
        CatchUpRun(LAST_FIRED + timedelta(minutes=5), "echo:poll:default:catchup:2026-05-01T09:05:00Z"),
    )
    assert catchups(id="q", every="15m", catch_up="run_once", command="sync") == (
        CatchUpRun(LAST_FIRED + timedelta(minutes=15), "echo:sync:q:catchup:2026-05-01T09:15:00Z"),
    )


def test_catch_up_run_all_fires_every_missed_5m_run() -> None:
    missed = catchups(every="5m", catch_up="run_all")
    # 09:05, 09:10, ... 12:00: 3 hours of 12 runs.
    assert len(missed) == 36
    assert missed[0].dedupe_key == "echo:poll:default:catchup:2026-05-01T09:05:00Z"
    assert missed[-1].dedupe_key == "echo:poll:default:catchup:2026-05-01T12:00:00Z"
    assert [m.nominal for m in missed] == [LAST_FIRED + timedelta(minutes=5 * i) for i in range(1, 37)]
    assert len({m.dedupe_key for m in missed}) == 36


def test_catch_up_run_all_fires_every_missed_15m_run() -> None:
    missed = catchups(every="15m", catch_up="run_all")
    assert [m.nominal for m in missed] == [LAST_FIRED + timedelta(minutes=15 * i) for i in range(1, 13)]


def test_catch_up_run_all_is_capped_at_100_runs() -> None:
    missed = catchups(every="1m", catch_up="run_all")
    assert CATCH_UP_LIMIT == 100
    assert len(missed) == 100  # of 180 missed
    assert missed[0].nominal == LAST_FIRED + timedelta(minutes=1)
    assert missed[-1].nominal == LAST_FIRED + timedelta(minutes=100)


def test_nothing_is_missed_within_one_interval_or_without_a_previous_firing() -> None:
    five = entry(every="5m", catch_up="run_all")
    assert catch_up(five, last_fired_at=utc(2026, 5, 1, 9, 0, 1), now=utc(2026, 5, 1, 9, 4, 59)) == ()
    assert catch_up(five, last_fired_at=None, now=BACK) == ()


def test_catch_up_applies_only_to_every_schedules() -> None:
    assert catch_up(entry(cron="*/5 * * * *"), last_fired_at=LAST_FIRED, now=BACK) == ()
    assert catch_up(entry(at="2026-05-01T10:00:00Z"), last_fired_at=LAST_FIRED, now=BACK) == ()


def test_catch_up_counts_only_runs_the_constraints_allow() -> None:
    # Down from Friday 1 May 22:30 to Sunday 3 May 01:30, Saturdays excluded: Friday 23:30, then
    # Sunday 00:30 and 01:30; Saturday's runs were never due.
    hourly = entry(every="hourly", not_on=["saturday"], catch_up="run_all", timezone="UTC")
    missed = catch_up(hourly, last_fired_at=utc(2026, 5, 1, 22, 30), now=utc(2026, 5, 3, 1, 30))
    assert [m.nominal for m in missed] == [utc(2026, 5, 1, 23, 30), utc(2026, 5, 3, 0, 30), utc(2026, 5, 3, 1, 30)]


# -- jitter: one offset per run, fixed, bounded ----------------------------------------------------


ANCHORS = [utc(2026, 5, 1) + timedelta(seconds=7 * n + 0.001 * n) for n in range(1000)]


def test_jitter_offsets_stay_within_half_the_jitter_either_way_and_spread_over_it() -> None:
    jittered = entry(every="5m", jitter="30s")
    offsets = [(every_run(jittered, a).due - every_run(jittered, a).nominal).total_seconds() for a in ANCHORS]
    assert all(-15 <= offset < 15 for offset in offsets)
    assert min(offsets) < -12 and max(offsets) > 12
    assert len(set(offsets)) > 990
    assert abs(sum(offsets) / len(offsets)) < 1.5


def test_jitter_is_the_same_for_a_run_however_and_whenever_it_is_computed() -> None:
    """Two schedulers, or one after a restart, compute the same offset for the same run."""
    for anchor in ANCHORS[:5]:
        assert every_run(entry(every="5m", jitter="30s"), anchor) == every_run(entry(every="5m", jitter="30s"), anchor)
    assert len({every_run(entry(every="5m", jitter="30s"), a).due - a for a in ANCHORS[:5]}) == 5


def test_jitter_differs_between_schedules_and_plugins() -> None:
    def dues_of(schedule: Schedule) -> list[datetime]:
        return [every_run(schedule, a).due for a in ANCHORS[:3]]

    base = dues_of(entry(every="5m", jitter="30s"))
    assert base != dues_of(entry(id="other", every="5m", jitter="30s"))
    assert base != dues_of(entry(plugin="py-greet", every="5m", jitter="30s"))


def test_a_negative_offset_fires_before_the_interval_is_up() -> None:
    jittered = entry(every="5m", jitter="4m")
    assert any(every_run(jittered, a).due < a + timedelta(minutes=5) for a in ANCHORS[:200])
    assert all(every_run(jittered, a).due > a + timedelta(minutes=3) for a in ANCHORS[:200])


def test_jitter_is_narrowed_to_keep_close_cron_runs_in_order() -> None:
    # Runs at :00 and :01 each hour; a 10m jitter is narrowed to the 1m gap, so at most 30s either way.
    close = entry(cron="0,1 * * * *", jitter="10m")
    chained = runs(close, utc(2026, 5, 1), 100)
    assert all(abs((run.due - run.nominal).total_seconds()) <= 30 for run in chained)
    assert all(a.due < b.due for a, b in pairwise(chained))
    assert {run.nominal.minute for run in chained} == {0, 1}


def test_jitter_never_moves_a_run_outside_its_window() -> None:
    office = entry(cron="*/5 * * * *", jitter="4m", only_between="08:00-09:00", timezone="UTC")
    chained = runs(office, utc(2026, 5, 1, 7), 60)
    assert all(time(8) <= run.due.time() < time(9) for run in chained)
    assert {run.nominal.strftime("%H:%M") for run in chained} == {f"08:{m:02d}" for m in range(0, 60, 5)}
