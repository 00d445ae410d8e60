"""Schedule entries typed and validated at config load.

Spec 000 §4.1-§4.3, the "Scheduler" detailed reference ("Schedule Entry Fields", "Time
Constraints", "Catch-up Policy", "Overlap Policy") and the cookbook's discord_notify schedules.
Every refusal names plugin, entry and field in its key and the entry's id in its message. No
database: these tests only touch the filesystem.
"""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.model import GatewayConfig, load_gateway_config
from gateway.config.schedules import (
    CatchUp,
    IfRunning,
    Interval,
    Kind,
    Schedule,
    Window,
    parse_schedules,
)
from gateway.config.yamlsrc import KeyPath, dotted
from tests.support.checkout import REPO
from tests.support.config_dirs import seal


def problem_at(path: KeyPath, message: str) -> ConfigProblem:
    return ConfigProblem(message, key=dotted(path))


def parse(*raw: Any, plugin: str = "echo") -> tuple[Schedule, ...]:
    parsed = parse_schedules(plugin, list(raw), problem_at)
    assert parsed.problems == (), [str(p) for p in parsed.problems]
    return parsed.entries


def entry(**raw: Any) -> Schedule:
    (only,) = parse(raw)
    return only


def refusals(*raw: Any) -> list[ConfigProblem]:
    parsed = parse_schedules("echo", list(raw), problem_at)
    assert parsed.entries == ()
    return list(parsed.problems)


def load_yaml(tmp_path: Path, text: str) -> GatewayConfig:
    (tmp_path / "config.yaml").write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    seal(tmp_path)
    return load_gateway_config(tmp_path, {})


def load_problems(tmp_path: Path, text: str) -> tuple[ConfigProblem, ...]:
    with pytest.raises(ConfigError) as caught:
        load_yaml(tmp_path, text)
    return caught.value.problems


# -- defaults and accepted values ------------------------------------------------------------


def test_an_entry_with_only_every_gets_the_spec_defaults() -> None:
    only = entry(every="5m")
    assert only.plugin == "echo"
    assert only.id == "default"
    assert only.command == "poll"
    assert only.payload == {}
    assert only.kind is Kind.EVERY
    assert only.every == Interval("5m", seconds=300)
    assert (only.cron, only.at, only.after) == (None, None, None)
    assert only.jitter == timedelta(0)
    assert only.only_between is None
    assert only.timezone == ZoneInfo("UTC")
    assert only.not_on == frozenset()
    assert only.catch_up is CatchUp.SKIP
    assert only.if_running is IfRunning.SKIP
    assert only.dedupe_key == "echo:poll:default"
    assert not only.one_shot


def test_the_scheduler_reference_example_entry_is_typed_field_by_field() -> None:
    """ "Schedule Entry Fields", verbatim."""
    only = entry(
        id="hourly",
        command="poll",
        every="1h",
        jitter="30s",
        catch_up="run_once",
        if_running="skip",
        only_between="08:00-18:00",
        timezone="Australia/Sydney",
        not_on=["saturday", "sunday"],
        payload={"source": "scheduler"},
    )
    assert only.id == "hourly"
    assert only.every == Interval("1h", seconds=3600)
    assert only.jitter == timedelta(seconds=30)
    assert only.catch_up is CatchUp.RUN_ONCE
    assert only.if_running is IfRunning.SKIP
    assert only.only_between == Window(time(8, 0), time(18, 0))
    assert only.timezone == ZoneInfo("Australia/Sydney")
    assert only.not_on == frozenset({6, 0})
    assert only.payload == {"source": "scheduler"}
    assert only.dedupe_key == "echo:poll:hourly"


@pytest.mark.parametrize(
    ("every", "seconds"),
    [
        ("5m", 300),
        ("15m", 900),
        ("30m", 1800),
        ("hourly", 3600),
        ("2h", 7200),
        ("daily", 86400),
        ("weekly", 604800),
        ("7m", 420),
        ("13h", 46800),
        ("3d", 259200),
        ("2w", 1209600),
        ("1h30m", 5400),
        ("10s", 10),
        ("Hourly", 3600),
        (300, 300),
    ],
)
def test_every_accepts_the_named_intervals_and_any_positive_duration(every: object, seconds: int) -> None:
    interval = entry(every=every).every
    assert interval is not None
    assert (interval.seconds, interval.months) == (seconds, 0)


def test_every_monthly_is_a_calendar_month() -> None:
    assert entry(every="monthly").every == Interval("monthly", months=1)


def test_cron_is_kept_with_its_fields_normalised() -> None:
    only = entry(id="weekdays-9am", cron="0  9 * *   1-5", timezone="Australia/Sydney")
    assert only.kind is Kind.CRON
    assert only.cron == "0 9 * * 1-5"


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2026-03-15T14:00:00Z", datetime(2026, 3, 15, 14, 0, tzinfo=UTC)),
        ("2026-03-15T14:00:00+10:00", datetime(2026, 3, 15, 4, 0, tzinfo=UTC)),
        ("2026-03-15t14:00:00.250-02:30", datetime(2026, 3, 15, 16, 30, 0, 250000, tzinfo=UTC)),
        ("2026-03-15 14:00:00z", datetime(2026, 3, 15, 14, 0, tzinfo=UTC)),
    ],
)
def test_at_is_an_rfc3339_time_kept_in_utc(text: str, instant: datetime) -> None:
    only = entry(id="send-once", at=text)
    assert only.kind is Kind.AT
    assert only.one_shot
    assert only.at == instant


def test_after_is_a_delay_and_the_cookbook_startup_one_shot_loads() -> None:
    morning, boot = parse(
        {
            "id": "morning-ping",
            "cron": "0 9 * * *",
            "command": "poll",
            "payload": {"message": "Good morning"},
            "not_on": ["saturday", "sunday"],
        },
        {"id": "boot-notify", "after": "30s", "command": "poll", "payload": {"message": "Ductile started."}},
    )
    assert morning.not_on == frozenset({0, 6})
    assert boot.kind is Kind.AFTER
    assert boot.after == timedelta(seconds=30)
    assert boot.one_shot


@pytest.mark.parametrize(
    ("not_on", "days"),
    [
        (["saturday", "sunday"], {6, 0}),
        (["Sat", "SUN"], {6, 0}),
        ([0, 6], {0, 6}),
        ([7], {0}),
        ([7, "sunday", 0], {0}),
        (["mon", "tue", "tues", "wed", "thu", "thurs", "fri"], {1, 2, 3, 4, 5}),
        ([], set()),
    ],
)
def test_not_on_takes_names_abbreviations_and_numbers_with_0_and_7_sunday(not_on: list[object], days: set[int]) -> None:
    assert entry(every="5m", not_on=not_on).not_on == frozenset(days)


def test_an_overnight_window_wraps_midnight_start_inclusive_end_exclusive() -> None:
    window = entry(every="5m", only_between="22:00-06:00").only_between
    assert window == Window(time(22, 0), time(6, 0))
    assert str(window) == "22:00-06:00"
    assert window.contains(time(22, 0))
    assert window.contains(time(23, 59))
    assert window.contains(time(0, 0))
    assert window.contains(time(5, 59, 59))
    assert not window.contains(time(6, 0))
    assert not window.contains(time(21, 59, 59))


def test_a_daytime_window_is_start_inclusive_end_exclusive() -> None:
    window = entry(every="5m", only_between=" 8:00 - 18:00 ").only_between
    assert window == Window(time(8, 0), time(18, 0))
    assert window.contains(time(8, 0))
    assert not window.contains(time(18, 0))
    assert not window.contains(time(7, 59))


@pytest.mark.parametrize(("policy", "expected"), [("skip", CatchUp.SKIP), ("run_once", CatchUp.RUN_ONCE)])
def test_catch_up_policies(policy: str, expected: CatchUp) -> None:
    assert entry(every="15m", catch_up=policy).catch_up is expected
    assert entry(every="15m", catch_up="run_all").catch_up is CatchUp.RUN_ALL


@pytest.mark.parametrize("policy", ["skip", "queue", "cancel"])
def test_if_running_policies(policy: str) -> None:
    assert entry(every="15m", if_running=policy).if_running is IfRunning(policy)


def test_catch_up_skip_is_allowed_on_any_kind() -> None:
    assert entry(cron="0 9 * * *", catch_up="skip").catch_up is CatchUp.SKIP


def test_the_payload_is_deep_frozen() -> None:
    payload = entry(every="5m", payload={"a": {"b": [1, 2]}}).payload
    with pytest.raises(TypeError):
        payload["a"]["c"] = 1  # type: ignore[index]
    assert payload["a"]["b"] == (1, 2)


def test_ids_are_unique_per_plugin_but_may_repeat_across_plugins() -> None:
    assert [e.id for e in parse({"id": "a", "every": "5m"}, {"id": "b", "every": "5m"})] == ["a", "b"]
    assert parse({"every": "5m"}, plugin="other")[0].dedupe_key == "other:poll:default"


def test_jitter_just_under_the_interval_is_accepted() -> None:
    assert entry(every="5m", jitter="4m59s").jitter == timedelta(minutes=4, seconds=59)
    assert entry(every="monthly", jitter="27d").jitter == timedelta(days=27)
    assert entry(cron="*/5 * * * *", jitter="2m").jitter == timedelta(minutes=2)


# -- refusals: plugin, entry and field in the key, the entry's id in the message ---------------


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        ({"id": "x"}, None, "exactly one of every, cron, at or after"),
        ({"id": "x", "every": "5m", "cron": "* * * * *"}, "cron", "every and cron are set"),
        ({"id": "x", "at": "2026-03-15T14:00:00Z", "after": "5m"}, "after", "exactly one of"),
        ({"id": "x", "every": "0s"}, "every", "positive duration"),
        ({"id": "x", "every": "fortnightly"}, "every", "monthly or another positive duration"),
        ({"id": "x", "every": "-5m"}, "every", "positive duration"),
        ({"id": "x", "every": "500ms"}, "every", "at least 1s"),
        ({"id": "x", "every": "1.5s"}, "every", "whole number of seconds"),
        ({"id": "x", "every": True}, "every", "positive duration"),
        ({"id": "x", "cron": "0 9 * *"}, "cron", "expected 5 fields"),
        ({"id": "x", "cron": "0 0 9 * * *"}, "cron", "got 6"),
        ({"id": "x", "cron": "@daily"}, "cron", "expected 5 fields"),
        ({"id": "x", "cron": "61 * * * *"}, "cron", "invalid cron expression"),
        ({"id": "x", "cron": "0 0 30 2 *"}, "cron", "invalid cron expression"),
        ({"id": "x", "cron": "R * * * *"}, "cron", "random (R) and hashed (H)"),
        ({"id": "x", "cron": "0 H * * *"}, "cron", "random (R) and hashed (H)"),
        ({"id": "x", "cron": 5}, "cron", "5-field cron expression"),
        ({"id": "x", "at": "2026-03-15T14:00:00"}, "at", "RFC 3339"),
        ({"id": "x", "at": "2026-03-15"}, "at", "RFC 3339"),
        ({"id": "x", "at": "tomorrow"}, "at", "RFC 3339"),
        ({"id": "x", "at": "2026-02-30T14:00:00Z"}, "at", "not a valid time"),
        ({"id": "x", "after": "soon"}, "after", "expected a duration"),
        ({"id": "x", "after": "-5m"}, "after", "expected a duration"),
        ({"id": "x", "every": "5m", "jitter": "lots"}, "jitter", "expected a duration"),
        ({"id": "x", "every": "5m", "jitter": "5m"}, "jitter", "(5m) must be shorter than the interval (5m)"),
        ({"id": "x", "every": "monthly", "jitter": "28d"}, "jitter", "28d at the shortest"),
        ({"id": "x", "at": "2026-03-15T14:00:00Z", "jitter": "1m"}, "jitter", "an at one-shot runs at its time"),
        ({"id": "x", "after": "1m", "jitter": "10s"}, "jitter", "an after one-shot"),
        (
            {"id": "x", "every": "5m", "only_between": "09:00-09:00"},
            "only_between",
            'start and end are equal ("09:00-09:00")',
        ),
        ({"id": "x", "every": "5m", "only_between": "25:00-06:00"}, "only_between", "00:00 to 23:59"),
        ({"id": "x", "every": "5m", "only_between": "08:60-09:00"}, "only_between", "00:00 to 23:59"),
        ({"id": "x", "every": "5m", "only_between": "9am-5pm"}, "only_between", "HH:MM-HH:MM"),
        ({"id": "x", "every": "5m", "only_between": ["08:00", "18:00"]}, "only_between", "HH:MM-HH:MM"),
        ({"id": "x", "every": "5m", "preferred_window": "10:00-10:00"}, "preferred_window", "start and end are equal"),
        ({"id": "x", "every": "5m", "timezone": "Mars/Olympus_Mons"}, "timezone", "IANA time zone"),
        ({"id": "x", "every": "5m", "timezone": "Australia"}, "timezone", "IANA time zone"),
        ({"id": "x", "every": "5m", "timezone": "local"}, "timezone", "IANA time zone"),
        ({"id": "x", "every": "5m", "timezone": "../etc/passwd"}, "timezone", "IANA time zone"),
        ({"id": "x", "every": "5m", "not_on": ["funday"]}, "not_on", "got 'funday'"),
        ({"id": "x", "every": "5m", "not_on": [8]}, "not_on", "7 also Sunday"),
        ({"id": "x", "every": "5m", "not_on": [-1]}, "not_on", "numbers 0-6"),
        ({"id": "x", "every": "5m", "not_on": [True]}, "not_on", "got True"),
        ({"id": "x", "every": "5m", "not_on": "sunday"}, "not_on", "expected a list of weekdays"),
        ({"id": "x", "every": "5m", "not_on": [0, 1, 2, 3, 4, 5, "sat"]}, "not_on", "would never run"),
        ({"id": "x", "every": "5m", "catch_up": "sometimes"}, "catch_up", "skip, run_once, run_all"),
        ({"id": "x", "cron": "0 9 * * *", "catch_up": "run_all"}, "catch_up", "applies only to every schedules"),
        ({"id": "x", "at": "2026-03-15T14:00:00Z", "catch_up": "run_once"}, "catch_up", "this one uses at"),
        ({"id": "x", "every": "5m", "if_running": "wait"}, "if_running", "skip, queue, cancel"),
        ({"id": "x", "every": "5m", "command": "handle"}, "command", "handle cannot be scheduled"),
        ({"id": "x", "every": "5m", "command": ""}, "command", "command name"),
        ({"id": "x", "every": "5m", "command": ["poll"]}, "command", "command name"),
        ({"id": "x", "every": "5m", "payload": "hello"}, "payload", "JSON object"),
        ({"id": "x", "every": "5m", "only_betwen": "08:00-18:00"}, "only_betwen", "did you mean 'only_between'?"),
        ({"id": "x", "every": "5m", "enabled": False}, "enabled", "unknown key 'enabled'; an entry takes id, command"),
    ],
)
def test_each_invalid_field_is_refused_naming_plugin_entry_and_field(
    raw: dict[str, object], field: str | None, fragment: str
) -> None:
    ok = {"id": "fine", "every": "5m"}
    (problem,) = refusals(ok, raw)
    assert problem.key == "plugins.echo.schedules[1]" + (f".{field}" if field else "")
    assert problem.message.startswith('schedule "x": ')
    assert fragment in problem.message


def test_the_briefs_only_between_example_reads_as_one_line() -> None:
    (problem,) = refusals({"every": "5m"}, {"id": "nightly", "every": "5m", "only_between": "09:00-09:00"})
    assert str(problem) == (
        'key plugins.echo.schedules[1].only_between: schedule "nightly": start and end are equal ("09:00-09:00")'
    )


@pytest.mark.parametrize("bad_id", ["a b", "a:b", "", "-x", 3, None])
def test_ids_must_be_names_that_fit_dedupe_keys_and_plugin_colon_id(bad_id: object) -> None:
    (problem,) = refusals({"id": bad_id, "every": "5m"})
    assert problem.key == "plugins.echo.schedules[0].id"
    assert problem.message.startswith(f'schedule "{bad_id}": ')


def test_a_duplicate_id_is_refused_naming_both_entries() -> None:
    (problem,) = refusals({"id": "a", "every": "5m"}, {"id": "b", "every": "5m"}, {"id": "a", "cron": "* * * * *"})
    assert problem.key == "plugins.echo.schedules[2].id"
    assert problem.message.startswith('schedule "a": duplicate schedule id (schedules[0] has it too')


def test_two_entries_without_id_are_both_named_default() -> None:
    (problem,) = refusals({"every": "5m"}, {"cron": "* * * * *"})
    assert problem.key == "plugins.echo.schedules[1].id"
    assert "an entry without id is named 'default'" in problem.message


def test_an_entry_that_is_not_a_mapping_is_refused() -> None:
    (problem,) = refusals("every 5m")
    assert problem.key == "plugins.echo.schedules[0]"
    assert "expected a schedule entry" in problem.message


def test_every_problem_of_an_entry_is_reported_not_just_the_first() -> None:
    problems = refusals({"id": "x", "every": "5m", "jitter": "1h", "timezone": "Nowhere", "if_running": "maybe"})
    assert sorted(p.key or "" for p in problems) == [
        "plugins.echo.schedules[0].if_running",
        "plugins.echo.schedules[0].jitter",
        "plugins.echo.schedules[0].timezone",
    ]


# -- through config loading: file, line, and the whole config refused ---------------------------


def test_an_invalid_entry_refuses_the_config_with_file_line_and_key(tmp_path: Path) -> None:
    problems = load_problems(
        tmp_path,
        """
        plugins:
          echo:
            schedules:
              - every: 5m
              - id: nightly
                every: 5m
                only_between: "09:00-09:00"
        """,
    )
    (problem,) = problems
    assert problem.file == tmp_path / "config.yaml"
    assert problem.line == 7
    assert problem.key == "plugins.echo.schedules[1].only_between"
    assert str(problem) == (
        f"{tmp_path / 'config.yaml'}:7 key plugins.echo.schedules[1].only_between:"
        ' schedule "nightly": start and end are equal ("09:00-09:00")'
    )


def test_schedule_problems_of_several_plugins_and_other_problems_are_reported_together(tmp_path: Path) -> None:
    problems = load_problems(
        tmp_path,
        """
        service:
          max_workers: 2
        plugins:
          echo:
            parallelism: 3
            schedules:
              - {cron: "0 9 * *"}
          uptime:
            enabled: false
            schedules:
              - {id: beat, every: 5m, command: handle}
        """,
    )
    assert sorted(p.key or "" for p in problems) == [
        "plugins.echo.parallelism",
        "plugins.echo.schedules[0].cron",
        "plugins.uptime.schedules[0].command",
    ]


def test_schedules_that_are_not_a_list_are_refused_once(tmp_path: Path) -> None:
    (problem,) = load_problems(tmp_path, "plugins:\n  echo:\n    schedules: {every: 5m}\n")
    assert problem.key == "plugins.echo.schedules"
    assert problem.line == 3


def test_preferred_window_is_accepted_with_a_warning_that_it_is_not_enforced(tmp_path: Path) -> None:
    config = load_yaml(
        tmp_path,
        """
        plugins:
          echo:
            schedules:
              - every: 5m
                preferred_window: "08:00-10:00"
        """,
    )
    (warning,) = config.warnings
    assert warning.key == "plugins.echo.schedules[0].preferred_window"
    assert warning.line == 5
    assert "not enforced" in warning.message
    assert config.plugins["echo"].schedules[0].only_between is None


def test_the_demo_fixture_schedules_stay_valid() -> None:
    config = load_gateway_config(REPO / "fixtures" / "demo", {})
    assert [(e.plugin, e.id, e.every) for e in config.scheduled_entries()] == [
        ("echo", "default", Interval("20s", seconds=20)),
        ("py-greet", "default", Interval("30s", seconds=30)),
        ("inventory_sync", "sync", Interval("20s", seconds=20)),
        ("status_feed", "feed", Interval("20s", seconds=20)),
    ]


def test_scheduled_entries_are_those_of_enabled_plugins_and_aliases_in_config_order(tmp_path: Path) -> None:
    config = load_yaml(
        tmp_path,
        """
        plugins:
          echo:
            schedules:
              - {id: fast, every: 5m}
              - {id: nightly, cron: "0 2 * * *", timezone: Australia/Sydney}
          quiet:
            enabled: false
            schedules:
              - every: 5m
          echo_loud:
            uses: echo
            schedules:
              - {at: "2026-03-15T14:00:00Z", command: shout}
        """,
    )
    assert [e.dedupe_key for e in config.scheduled_entries()] == [
        "echo:poll:fast",
        "echo:poll:nightly",
        "echo_loud:shout:default",
    ]
    assert [e.id for e in config.plugins["quiet"].schedules] == ["default"]
