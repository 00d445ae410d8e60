"""Requests refused before their sender proved who it is, counted per client address, logged at a
bounded rate, and kept where an operator reads it: failed API authentication (a bad, malformed or
missing bearer token on a protected route; gateway/http/api/auth.py) and rejected webhook deliveries
(a missing or wrong signature, an oversized body; gateway/http/webhooks/views.py).

A flood must cost neither the disk nor the API: a failure is a counter bumped under a lock, never a
line of its own. A source's first failure is logged at once; those after it, until `interval` has
passed with none, make one line per interval with their count. At most `max_sources` addresses are
tracked at a time; beyond them failures are counted under OTHERS. So a process writes at most
(max_sources + 1) lines per interval however many requests it refuses.

The tally an operator reads (`system status`) is a small JSON file beside the database, one per
kind, merged by every process of the host under a `flock` at most once per interval, when it has
new failures.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.config.errors import ConfigError
from gateway.logs import logger
from gateway.runtime import RUNTIME
from ledger.timestamps import rfc3339

INTERVAL = 60.0
MAX_SOURCES = 256
OTHERS = "(other addresses)"
# Sources kept in the tally file: the most recent ones.
TALLY_SOURCES = 50
API_TALLY = "api-auth-failures.json"
WEBHOOK_TALLY = "webhook-rejections.json"
# A request's path is the client's to choose: only its start is logged.
PATH_SHOWN = 200


def _now() -> str:
    return rfc3339(datetime.now(UTC), "seconds")


@dataclass(frozen=True)
class Kind:
    """What is refused, in the words of its log lines, where they go, and the host's tally file."""

    one: str  # "failed API authentication"
    many: str  # "failed API authentications"
    logger: str  # gateway.logs.logger's name
    tally_file: str

    def tally_path(self, state_path: Path) -> Path:
        """Beside the database (`state.path`), as the API's other per-host files."""
        return state_path.parent / self.tally_file


API_AUTHENTICATION = Kind("failed API authentication", "failed API authentications", "api", API_TALLY)
WEBHOOK_DELIVERY = Kind("rejected webhook delivery", "rejected webhook deliveries", "webhooks", WEBHOOK_TALLY)


@dataclass
class _Source:
    count: int = 0  # since this source's last line
    reasons: dict[str, int] = field(default_factory=dict)
    last_path: str = ""


class Refusals:
    """This process's refusals of one kind (module docstring). `tally` says where the file is
    (None: the counts are logged only); by default the kind's file beside the loaded config's
    database."""

    def __init__(
        self,
        kind: Kind,
        tally: Callable[[], Path | None] | None = None,
        interval: float = INTERVAL,
        max_sources: int = MAX_SOURCES,
    ) -> None:
        self.kind = kind
        self._log = logger(kind.logger)
        self._tally = tally or self._beside_the_database
        self.interval = interval
        self.max_sources = max_sources
        self._lock = threading.Lock()
        self._quiet: dict[str, _Source] = {}  # sources logged within the interval: counted, not logged
        self._unsaved: dict[str, tuple[int, str, str]] = {}  # source -> (failures, last reason, last at)
        self._timer: threading.Timer | None = None

    def _beside_the_database(self) -> Path | None:
        try:
            return self.kind.tally_path(RUNTIME.get().config.state_path)
        except ConfigError:
            return None  # no config loaded: the server answers 503 and counts nothing meanwhile

    def record(self, source: str | None, reason: str, path: str) -> None:
        source, path = source or "unknown", path[:PATH_SHOWN]
        first = False
        with self._lock:
            if source not in self._quiet and len(self._quiet) >= self.max_sources:
                source = OTHERS
            known = self._quiet.get(source)
            if known is None:
                self._quiet[source] = _Source()
                first = True
            else:
                known.count += 1
                known.reasons[reason] = known.reasons.get(reason, 0) + 1
                known.last_path = path
            failures, _, _ = self._unsaved.get(source, (0, "", ""))
            self._unsaved[source] = (failures + 1, reason, _now())
            if self._timer is None:
                self._timer = threading.Timer(self.interval, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if first:
            self._log.warning(
                "%s from %s: %s (%s); more from it are counted, one line per %g s",
                self.kind.one,
                source,
                reason,
                path,
                self.interval,
                extra={"client_ip": source, "failures": 1},
            )

    def flush(self) -> None:
        """The interval's lines, and the tally; the next interval starts. Runs on the timer."""
        with self._lock:
            talkative = {source: seen for source, seen in self._quiet.items() if seen.count}
            # A source quiet for a whole interval is logged at once again when it next fails.
            self._quiet = {source: _Source() for source in talkative}
            unsaved, self._unsaved = self._unsaved, {}
            self._timer = None
            if self._quiet:  # the next interval's lines
                self._timer = threading.Timer(self.interval, self.flush)
                self._timer.daemon = True
                self._timer.start()
        for source, seen in talkative.items():
            reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(seen.reasons.items()))
            self._log.warning(
                "%d more %s from %s in the last %g s (%s; last on %s)",
                seen.count,
                self.kind.many,
                source,
                self.interval,
                reasons,
                seen.last_path,
                extra={"client_ip": source, "failures": seen.count},
            )
        path = self._tally()
        if unsaved and path is not None:
            try:
                merge_tally(path, unsaved)
            except OSError as exc:
                self._log.warning("could not keep the count of %s in %s: %s", self.kind.many, path, exc)


def merge_tally(path: Path, unsaved: dict[str, tuple[int, str, str]]) -> None:
    """Add this process's new failures to the host's tally, under an exclusive `flock` of the file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # no SQLite file there (PostgreSQL)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "r+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            tally = json.loads(file.read() or "{}")
        except ValueError:
            tally = {}  # a file cut short (a full disk): the count starts again
        sources: dict[str, Any] = tally.get("sources", {})
        for source, (failures, reason, at) in unsaved.items():
            kept = sources.get(source, {"failures": 0})
            sources[source] = {"failures": kept["failures"] + failures, "last_reason": reason, "last_at": at}
        newest = sorted(sources.items(), key=lambda item: item[1]["last_at"], reverse=True)[:TALLY_SOURCES]
        tally = {
            "since": tally.get("since") or min(at for _, _, at in unsaved.values()),
            "failures": tally.get("failures", 0) + sum(n for n, _, _ in unsaved.values()),
            "last_at": max(at for _, _, at in unsaved.values()),
            "sources": dict(newest),
        }
        file.seek(0)
        file.truncate()
        # No `indent`: it takes json's pure-Python encoder, whose closures leave reference cycles for
        # the collector, whose passes stop every thread of the API worker (gateway/http/cycles.py).
        file.write(json.dumps(tally))


def read_tally(path: Path) -> dict[str, Any]:
    """The host's refusals of one kind for `system status`: a count since a time, the last one's
    time, and the most recent sources (each with its count, last reason and time)."""
    try:
        tally = json.loads(path.read_text())
    except FileNotFoundError:
        return {"failures": 0, "since": None, "last_at": None, "sources": {}}
    except (OSError, ValueError) as exc:
        return {"failures": None, "error": f"{path}: {exc}"}
    return dict(tally)
