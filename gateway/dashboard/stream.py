"""The dashboard pages' Server-Sent Events: the `/events` stream's machinery (cursor, wake-ups,
keep-alives, stopping with the server: gateway/eventstream.py) carrying what a page draws.

A page names the parts it wants (`parts`, a function of nothing returning {event name: data}).
They are recomputed only when the ledger moved (`gateway.live.CLOCK`, shared by every stream of
the process and read at most twice a second), and each is sent only when it differs from what
this stream sent last. The overview also gets new `event_log` rows, batched per wake-up.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from gateway import eventstream
from gateway.live import CLOCK, LedgerClock, event_summary

# A burst can record hundreds of events between two wake-ups; the page lists the latest few, so a
# frame carries at most this many (the newest).
MAX_EVENTS_PER_FRAME = 50
# How soon EventSource reconnects after the connection drops (a gateway restart), in ms.
RETRY_MS = 2000

Parts = Callable[[], dict[str, Any]]


def message(name: str, text: str) -> bytes:
    return f"event: {name}\ndata: {text}\n\n".encode()


class PageFeed:
    """One page's stream state: what it was sent last, and the clock generation that was for."""

    def __init__(self, parts: Parts, events: eventstream.EventCursor | None, clock: LedgerClock):
        self.parts, self.events, self.clock = parts, events, clock
        self.generation: int | None = None
        self.sent: dict[str, str] = {}

    def poll(self) -> tuple[list[bytes], bool]:
        frames: list[bytes] = []
        more = False
        if self.events is not None:
            rows = eventstream.next_rows(self.events)
            more = len(rows) == eventstream.BATCH
            if rows:
                recent = [event_summary(row) for row in rows[-MAX_EVENTS_PER_FRAME:]]
                frames.append(message("events", json.dumps(recent, separators=(",", ":"))))
        generation = self.clock.tick()
        if generation != self.generation:
            self.generation = generation
            for name, data in self.parts().items():
                text = json.dumps(data, separators=(",", ":"), default=str)
                if self.sent.get(name) != text:
                    self.sent[name] = text
                    frames.append(message(name, text))
        return frames, more


def page_stream(
    parts: Parts, *, with_events: bool, clock: LedgerClock = CLOCK, bell: eventstream.Bell = eventstream.BELL
) -> Iterator[bytes]:
    cursor = eventstream.EventCursor(eventstream.latest_id()) if with_events else None
    feed = PageFeed(parts, cursor, clock)
    return eventstream.serve(feed.poll, f": stream open\nretry: {RETRY_MS}\n\n".encode(), bell)
