"""Sub-span timings for Python plugins: the `ductile_stopwatch_subs` list of a response.

The gateway times every plugin invocation itself (spec 000, "Stopwatch"): one `job_stopwatch` row
per attempt. A plugin that wants to show where its own time went adds a list of sub-spans to its
response under `ductile_stopwatch_subs`; the gateway keeps the first 32 well-formed entries (or the
manifest's `stopwatch.max_subs`), drops malformed ones without complaint, and stores the rest
verbatim in `job_stopwatch.subs_json`. This module builds that list:

    from _stopwatch import SUBS_RESPONSE_KEY, Spans

    spans = Spans()
    with spans.time("myplugin.http_get") as span:
        body = get(url)
        span.annotate(bytes=len(body), status="ok")
    spans.add("myplugin.rows", dur_ns=summed_ns, count=len(rows))
    response[SUBS_RESPONSE_KEY] = spans.to_response_key()

Each entry is `{"name": "<plugin>.<phase>", "dur_ns": <int>, ...}` with the optional convention
fields `status` (ok | err | skip), `bytes` (I/O spans) and `count` (batch spans). A block that
raises is still recorded, with `status: err` unless it set a status itself, so a plugin can ship
its spans beside an error response.

Standard library only, so any Python 3.8+ interpreter can use it. The bundled plugins import it
from here (`sys.path` gets the `_lib` directory beside the plugin's own); a plugin kept in a plugin
root of its own copies this file next to its entrypoint. Either way the gateway's seal covers a
plugin's manifest and entrypoint only, not the modules it imports.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

SUBS_RESPONSE_KEY = "ductile_stopwatch_subs"

# The gateway's default cap. Spans past it would only be dropped there (head kept), so they are
# not sent; a plugin whose manifest raises `stopwatch.max_subs` passes the same number to Spans.
_MAX_SUBS = 32


class Spans:
    """The sub-spans of one invocation, in the order they ended (put the telling ones first)."""

    def __init__(self, max_subs: int = _MAX_SUBS) -> None:
        self._spans: list[dict[str, Any]] = []
        self._max_subs = max_subs

    def time(self, name: str, **extra: Any) -> _Span:
        """A context manager timing its block as span `name` (with `extra` fields)."""
        return _Span(self, name, dict(extra))

    def add(self, name: str, dur_ns: int, **extra: Any) -> None:
        """A span timed by the caller: a sum over items or hops, with `count` saying how many."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"a sub-span's name must be a non-empty string, not {name!r}")
        record: dict[str, Any] = {"name": name, "dur_ns": int(dur_ns)}
        record.update(extra)
        self._spans.append(record)

    def to_response_key(self) -> list[dict[str, Any]]:
        """The list for the response's `ductile_stopwatch_subs`, at most `max_subs` long."""
        return self._spans[: self._max_subs]

    def __len__(self) -> int:
        return len(self._spans)


class _Span:
    """One timed block; `annotate` adds fields (`bytes`, `count`, `status`) before it ends."""

    __slots__ = ("_parent", "_name", "_extra", "_started")

    def __init__(self, parent: Spans, name: str, extra: dict[str, Any]) -> None:
        self._parent = parent
        self._name = name
        self._extra = extra
        self._started = 0

    def __enter__(self) -> _Span:
        # perf_counter_ns: monotonic and an int, the wire's `dur_ns` type (a float is dropped).
        self._started = time.perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        duration = time.perf_counter_ns() - self._started
        if exc is not None:
            self._extra.setdefault("status", "err")
        self._parent.add(self._name, duration, **self._extra)

    def annotate(self, **fields: Any) -> None:
        self._extra.update(fields)
