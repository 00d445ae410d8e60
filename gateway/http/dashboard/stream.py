"""The dashboard pages' Server-Sent Events: the `/events` stream's machinery (cursor, wake-ups,
keep-alives, stopping with the server: gateway/http/eventstream.py) carrying what a page draws.

A page names the parts it wants (`parts`, a function of nothing returning {event name: data}).
They are recomputed only when the ledger moved (`gateway.reports.live.CLOCK`, shared by every stream of
the process and read at most twice a second), and each is sent only when it differs from what
this stream sent last. The overview also gets the `event_log` rows recorded since, batched: read
when the clock moved, as the snapshot (whose latest events are the truth should one be missed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gateway.reports import events, live
from gateway.reports.live import LedgerClock, event_summary

# A burst can record hundreds of events between two wake-ups; the page lists the latest few, so a
# frame carries at most this many (the newest).
MAX_EVENTS_PER_FRAME = 50
# How soon EventSource reconnects after the connection drops (a gateway restart), in ms.
RETRY_MS = 2000

Parts = Callable[[], dict[str, Any]]


def message(name: str, text: str) -> bytes:
    return f"event: {name}\ndata: {text}\n\n".encode()


class PageFeed:
    """One page's stream (an eventstream.Feed): what it was sent last, and the clock generation
    that was for. Nothing is read while the clock stands still: an idle gateway costs an open page
    one look at the change marker per tick of the clock, shared with every other page of the
    process. It is woken by finished jobs like /events, else every tick of the clock."""

    def __init__(self, parts: Parts, events: events.EventCursor | None, clock: LedgerClock):
        self.parts, self.events, self.clock = parts, events, clock
        self.generation: int | None = None
        self.sent: dict[str, str] = {}
        self.opening = f": stream open\nretry: {RETRY_MS}\n\n".encode()
        self.interval = clock.min_interval

    def poll(self, memo: dict[str, Any], rung: bool) -> tuple[list[bytes], bool]:
        generation = self.clock.tick()
        if generation == self.generation:
            return [], False
        self.generation = generation
        frames: list[bytes] = []
        more = False
        if self.events is not None:
            rows = events.next_rows(self.events, memo)
            if more := len(rows) == events.BATCH:
                self.generation = None  # the rest of a burst: read again at once
            if rows:
                recent = [event_summary(row) for row in rows[-MAX_EVENTS_PER_FRAME:]]
                frames.append(message("events", json.dumps(recent, separators=(",", ":"))))
        for name, data in self.parts().items():
            text = _encoded(data, memo)
            if self.sent.get(name) != text:
                self.sent[name] = text
                frames.append(message(name, text))
        return frames, more


def _encoded(data: Any, memo: dict[Any, Any]) -> str:
    """`data` as JSON, encoded once per pass for every page showing the same object (the live
    figures are one snapshot per clock generation, shared by every overview page)."""
    key = ("json", id(data))
    found = memo.get(key)
    if found is None or found[0] is not data:
        found = memo[key] = (data, json.dumps(data, separators=(",", ":"), default=str))
    return str(found[1])


def page_feed(parts: Parts, *, with_events: bool, clock: LedgerClock | None = None) -> PageFeed:
    """A page's feed on the clock it can see: by default the process's own (`live.CLOCK`)."""
    clock = clock or live.CLOCK
    cursor = events.EventCursor(events.latest_id()) if with_events else None
    return PageFeed(parts, cursor, clock)
