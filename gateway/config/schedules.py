"""Schedule entries: a plugin's (or alias's) `schedules:` list, typed and validated at config load.

Spec 000 §4.1-§4.3 and the "Scheduler" detailed reference ("Schedule Entry Fields", "Time
Constraints", "Catch-up Policy", "Overlap Policy"). An invalid entry refuses the whole config; each
refusal's key names plugin, entry and field (`plugins.echo.schedules[1].only_between`) and its
message starts with the entry's id, so an agent can fix it without guessing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.config.durations import format_duration, parse_duration
from gateway.config.errors import ConfigProblem
from gateway.config.frozen import freeze
from gateway.config.yamlsrc import KeyPath

DEFAULT_ID = "default"
DEFAULT_COMMAND = "poll"
# Without `timezone:` an entry reads the host's local clock, as the original does (000's runbook:
# "Ductile cron runs in the system timezone unless overridden"). Schedulers on hosts in different
# zones then disagree: such a deployment sets `timezone:` on its entries.
HOST_ZONE_NAMES = ("Local", "localtime")
FALLBACK_TIMEZONE = "UTC"  # a host whose zone has no IANA name (tzlocal finds none)
# The shortest month bounds jitter for `every: monthly`, as the interval bounds it for the rest.
SHORTEST_MONTH = timedelta(days=28)

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_WINDOW = re.compile(r"\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
# croniter's R (random) and H (hashed) values: schedulers in several processes must agree on times.
_CRON_NONDETERMINISTIC = re.compile(r"(^|[,/\-(])[RrHh]($|[,/\-(])")
_NAMED_INTERVALS = {"hourly": 3600, "daily": 86400, "weekly": 7 * 86400}
_WEEKDAYS = {
    **dict.fromkeys(("sunday", "sun"), 0),
    **dict.fromkeys(("monday", "mon"), 1),
    **dict.fromkeys(("tuesday", "tue", "tues"), 2),
    **dict.fromkeys(("wednesday", "wed"), 3),
    **dict.fromkeys(("thursday", "thu", "thurs"), 4),
    **dict.fromkeys(("friday", "fri"), 5),
    **dict.fromkeys(("saturday", "sat"), 6),
}
_TRIGGERS = ("every", "cron", "at", "after")
_KEYS = (
    "id",
    "command",
    "payload",
    *_TRIGGERS,
    "jitter",
    "only_between",
    "timezone",
    "not_on",
    "catch_up",
    "if_running",
    "preferred_window",
)


_Choice = TypeVar("_Choice", bound=StrEnum)


class Kind(StrEnum):
    EVERY = "every"
    CRON = "cron"
    AT = "at"
    AFTER = "after"


class CatchUp(StrEnum):
    SKIP = "skip"
    RUN_ONCE = "run_once"
    RUN_ALL = "run_all"


class IfRunning(StrEnum):
    SKIP = "skip"
    QUEUE = "queue"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Interval:
    """An `every:` value: `seconds` (whole, at least 1), or `months` (`monthly`, 1) with seconds 0."""

    text: str
    seconds: int = 0
    months: int = 0

    @property
    def shortest(self) -> timedelta:
        return SHORTEST_MONTH * self.months if self.months else timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class Window:
    """`only_between`: local wall-clock times, start inclusive, end exclusive; start > end wraps midnight."""

    start: time
    end: time

    def contains(self, wall: time) -> bool:
        if self.start < self.end:
            return self.start <= wall < self.end
        return wall >= self.start or wall < self.end

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"


@dataclass(frozen=True)
class Schedule:
    """One validated entry. Exactly one of `every`, `cron`, `at`, `after` is set, as `kind` says."""

    plugin: str
    id: str
    kind: Kind
    command: str
    payload: Mapping[str, Any]
    every: Interval | None
    cron: str | None
    at: datetime | None  # UTC
    after: timedelta | None
    jitter: timedelta
    only_between: Window | None
    timezone: ZoneInfo
    not_on: frozenset[int]  # 0 = Sunday ... 6 = Saturday
    catch_up: CatchUp
    if_running: IfRunning

    @property
    def dedupe_key(self) -> str:
        """Every scheduled enqueue's key (spec: `<plugin>:<command>:<schedule_id>`)."""
        return f"{self.plugin}:{self.command}:{self.id}"

    @property
    def one_shot(self) -> bool:
        return self.kind in (Kind.AT, Kind.AFTER)


@dataclass(frozen=True)
class ParsedSchedules:
    entries: tuple[Schedule, ...]
    problems: tuple[ConfigProblem, ...]
    warnings: tuple[ConfigProblem, ...]


ProblemAt = Callable[[KeyPath, str], ConfigProblem]


def parse_schedules(plugin: str, raw: object, problem_at: ProblemAt) -> ParsedSchedules:
    """Type one plugin's raw `schedules:` value. `problem_at(path, message)` places a problem in
    its file and line (`MergedConfig.problem`, `GatewayConfig.problem`)."""
    path: KeyPath = ("plugins", plugin, "schedules")
    if raw is None:
        return ParsedSchedules((), (), ())
    if not isinstance(raw, list):
        return ParsedSchedules((), (problem_at(path, "expected a list of schedule entries"),), ())
    entries: list[Schedule] = []
    problems: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []
    first_index_of: dict[str, int] = {}
    for index, item in enumerate(raw):
        reader = _EntryReader(plugin, (*path, index), problem_at)
        entry = reader.read(item)
        problems.extend(reader.problems)
        warnings.extend(reader.warnings)
        if reader.id in first_index_of:
            problems.append(
                reader.problem(
                    "id",
                    f"duplicate schedule id (schedules[{first_index_of[reader.id]}] has it too;"
                    f" an entry without id is named {DEFAULT_ID!r})",
                )
            )
        first_index_of.setdefault(reader.id, index)
        if entry is not None:
            entries.append(entry)
    if problems:
        return ParsedSchedules((), tuple(problems), tuple(warnings))
    return ParsedSchedules(tuple(entries), (), tuple(warnings))


def host_timezone() -> ZoneInfo:
    """The host's local time zone (TZ, else /etc/localtime), by its IANA name so that reports and
    fingerprints name it; read once per process."""
    from tzlocal import get_localzone_name  # why a library: TZ, /etc/timezone, /etc/localtime links

    try:
        return ZoneInfo(get_localzone_name() or FALLBACK_TIMEZONE)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return ZoneInfo(FALLBACK_TIMEZONE)


class _EntryReader:
    """Reads one entry, collecting every problem rather than stopping at the first."""

    def __init__(self, plugin: str, path: KeyPath, problem_at: ProblemAt):
        self.plugin = plugin
        self.path = path
        self.problem_at = problem_at
        self.problems: list[ConfigProblem] = []
        self.warnings: list[ConfigProblem] = []
        self.id = DEFAULT_ID

    def problem(self, key: str | None, message: str) -> ConfigProblem:
        return self.problem_at(self.path if key is None else (*self.path, key), f'schedule "{self.id}": {message}')

    def fail(self, key: str | None, message: str) -> None:
        self.problems.append(self.problem(key, message))

    def read(self, item: object) -> Schedule | None:
        if not isinstance(item, Mapping):
            self.problems.append(
                self.problem_at(
                    self.path, f"expected a schedule entry (a mapping with every, cron, at or after), got {item!r}"
                )
            )
            return None
        raw_id = item.get("id", DEFAULT_ID)
        self.id = str(raw_id)
        if not isinstance(raw_id, str) or not _ID.fullmatch(raw_id):
            self.fail("id", "expected letters, digits, '_', '.' or '-' (ids appear in dedupe keys and `PLUGIN:ID`)")
        for key in item:
            if key not in _KEYS:
                close = difflib.get_close_matches(str(key), _KEYS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.fail(str(key), f"unknown key {key!r}{hint}; an entry takes {', '.join(_KEYS)}")
        command = self._command(item.get("command", DEFAULT_COMMAND))
        payload = item.get("payload", {})
        if not isinstance(payload, Mapping):
            self.fail("payload", f"expected a mapping (a JSON object), got {payload!r}")
        kind = self._kind(item)
        every = self._every(item["every"]) if "every" in item else None
        cron = self._cron(item["cron"]) if "cron" in item else None
        at = self._at(item["at"]) if "at" in item else None
        after = self._duration("after", item["after"]) if "after" in item else None
        jitter = self._jitter(item.get("jitter"), kind, every)
        only_between = self._window("only_between", item.get("only_between"))
        if item.get("preferred_window") is not None and self._window("preferred_window", item["preferred_window"]):
            self.warnings.append(
                self.problem("preferred_window", "accepted but not enforced (spec 000 §4.2); only_between is")
            )
        zone = self._timezone(item["timezone"]) if "timezone" in item else host_timezone()
        not_on = self._not_on(item.get("not_on", []))
        catch_up = self._choice("catch_up", item.get("catch_up", CatchUp.SKIP), CatchUp)
        if catch_up not in (None, CatchUp.SKIP) and kind not in (None, Kind.EVERY):
            self.fail("catch_up", f"{catch_up} applies only to every schedules (this one uses {kind})")
        if_running = self._choice("if_running", item.get("if_running", IfRunning.SKIP), IfRunning)
        if self.problems or kind is None or zone is None or catch_up is None or if_running is None:
            return None
        return Schedule(
            plugin=self.plugin,
            id=self.id,
            kind=kind,
            command=command,
            payload=freeze(payload),
            every=every,
            cron=cron,
            at=at,
            after=after,
            jitter=jitter,
            only_between=only_between,
            timezone=zone,
            not_on=not_on,
            catch_up=catch_up,
            if_running=if_running,
        )

    def _command(self, value: object) -> str:
        if not isinstance(value, str) or not value or value.strip() != value:
            self.fail("command", f"expected a command name such as {DEFAULT_COMMAND}, got {value!r}")
            return DEFAULT_COMMAND
        if value == "handle":
            self.fail("command", "handle cannot be scheduled: it processes inbound events (schedule poll)")
        return value

    def _kind(self, item: Mapping[str, Any]) -> Kind | None:
        present = [key for key in _TRIGGERS if key in item]
        if not present:
            self.fail(None, "needs exactly one of every, cron, at or after")
            return None
        if len(present) > 1:
            self.fail(
                present[1], f"{' and '.join(present)} are set; a schedule takes exactly one of every, cron, at or after"
            )
        return Kind(present[0])

    def _every(self, value: object) -> Interval | None:
        expected = (
            "expected 5m, 15m, 30m, hourly, 2h, daily, weekly, monthly or another positive duration"
            f" such as 7m, 13h, 3d or 2w, got {value!r}"
        )
        text = value.strip().lower() if isinstance(value, str) else None
        if text == "monthly":
            return Interval(text, months=1)
        named = _NAMED_INTERVALS.get(text) if text else None
        try:
            seconds = float(named) if named else parse_duration(value)
        except ValueError:
            self.fail("every", expected)
            return None
        if seconds <= 0:
            self.fail("every", expected)
            return None
        if seconds < 1 or seconds != int(seconds):
            # Catch-up dedupe keys carry the run's time to the second (spec: RFC 3339).
            self.fail("every", f"must be a whole number of seconds, at least 1s, got {value!r}")
            return None
        return Interval(text or format_duration(seconds), seconds=int(seconds))

    def _cron(self, value: object) -> str | None:
        if not isinstance(value, str):
            self.fail("cron", f"expected a 5-field cron expression such as '0 9 * * 1-5', got {value!r}")
            return None
        fields = value.split()
        if len(fields) != 5:
            self.fail(
                "cron",
                f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)} in {value!r}",
            )
            return None
        if any(_CRON_NONDETERMINISTIC.search(field) for field in fields):
            self.fail("cron", f"random (R) and hashed (H) values are not allowed: schedulers must agree ({value!r})")
            return None
        expression = " ".join(fields)
        # Imported only for a config that has a cron expression: croniter's import runs
        # platform.architecture(), which spawns `file` on the interpreter, ~20 ms of every process's
        # start (runworkers, every CLI call) whose config schedules nothing by cron.
        from croniter import CroniterError, croniter

        try:
            croniter(expression, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
        except (CroniterError, ValueError, KeyError, TypeError) as exc:
            self.fail("cron", f"invalid cron expression {value!r}: {exc}")
            return None
        return expression

    def _at(self, value: object) -> datetime | None:
        if not isinstance(value, str) or not _RFC3339.fullmatch(value.strip()):
            self.fail("at", f"expected an RFC 3339 time with its offset, such as 2026-03-15T14:00:00Z, got {value!r}")
            return None
        try:
            moment = datetime.fromisoformat(value.strip().upper())
        except ValueError as exc:
            self.fail("at", f"not a valid time: {exc} ({value!r})")
            return None
        return moment.astimezone(UTC)

    def _duration(self, key: str, value: object) -> timedelta | None:
        try:
            return timedelta(seconds=parse_duration(value))
        except ValueError as exc:
            self.fail(key, str(exc))
            return None

    def _jitter(self, value: object, kind: Kind | None, every: Interval | None) -> timedelta:
        if value is None:
            return timedelta(0)
        jitter = self._duration("jitter", value)
        if jitter is None or not jitter:
            return timedelta(0)
        if kind in (Kind.AT, Kind.AFTER):
            self.fail("jitter", f"applies to repeating schedules (every, cron); an {kind} one-shot runs at its time")
        elif every is not None and jitter >= every.shortest:
            self.fail(
                "jitter",
                f"({format_duration(jitter.total_seconds())}) must be shorter than the interval"
                f" ({every.text}{', 28d at the shortest' if every.months else ''})",
            )
        return jitter

    def _window(self, key: str, value: object) -> Window | None:
        if value is None:
            return None
        text = value.strip() if isinstance(value, str) else ""
        match = _WINDOW.fullmatch(text)
        if match is None:
            self.fail(key, f'expected HH:MM-HH:MM such as "08:00-22:00", got {value!r}')
            return None
        hour1, minute1, hour2, minute2 = (int(part) for part in match.groups())
        if max(hour1, hour2) > 23 or max(minute1, minute2) > 59:
            self.fail(key, f"times must be 00:00 to 23:59, got {value!r}")
            return None
        window = Window(time(hour1, minute1), time(hour2, minute2))
        if window.start == window.end:
            self.fail(key, f'start and end are equal ("{text}")')
            return None
        return window

    def _timezone(self, value: object) -> ZoneInfo | None:
        # Go's name for the host's zone (the original reads `timezone:` with time.LoadLocation),
        # and the file the host's zone lives in: both say outright what the default already is.
        if value in HOST_ZONE_NAMES:
            return host_timezone()
        if isinstance(value, str):
            try:
                return ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError, OSError):
                pass
        self.fail("timezone", f"expected an IANA time zone such as Australia/Sydney or UTC, got {value!r}")
        return None

    def _not_on(self, value: object) -> frozenset[int]:
        if not isinstance(value, list):
            self.fail("not_on", f"expected a list of weekdays such as [saturday, sunday] or [0, 6], got {value!r}")
            return frozenset()
        days: set[int] = set()
        for day in value:
            if isinstance(day, int) and not isinstance(day, bool) and 0 <= day <= 7:
                days.add(day % 7)
            elif isinstance(day, str) and day.strip().lower() in _WEEKDAYS:
                days.add(_WEEKDAYS[day.strip().lower()])
            else:
                self.fail(
                    "not_on",
                    f"expected weekday names (sunday, monday, ... or sun, mon, ...) or numbers 0-6"
                    f" (0 = Sunday, 7 also Sunday), got {day!r}",
                )
        if len(days) == 7:
            self.fail("not_on", "excludes every day of the week: the schedule would never run")
        return frozenset(days)

    def _choice(self, key: str, value: object, choices: type[_Choice]) -> _Choice | None:
        if isinstance(value, str):
            try:
                return choices(value)
            except ValueError:
                pass
        self.fail(key, f"expected one of {', '.join(choices)}, got {value!r}")
        return None
