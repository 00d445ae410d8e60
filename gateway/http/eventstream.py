"""`GET /events`: the live `event_log` as Server-Sent Events, resumable by row id.

The rows come from gateway/reports/events.py (the cursor and why it watches gaps).

Waking. Streams sleep on the finished-job wake-up (jobs write their events in the transaction that
finishes them) and re-check the database at least every POLL_SECONDS, which also covers events
written without a finish (retries). One listener serves every stream of the process.

Stopping. A stream never ends on its own, and gunicorn's graceful stop waits for every open
request up to its graceful_timeout. So the server's stop signal calls `stop_streams()`
(ductile_site/gunicorn.py), which ends every stream of the process at once: each sends a last
comment and returns, the response ends cleanly (the chunked terminator), and a client reconnects
with Last-Event-ID to the next server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from django.http.response import HttpResponseBase

from gateway.reports.events import BATCH, EventCursor, next_rows, row_data
from gateway.storage.wakeup import WakeListener
from ledger import wakeups
from ledger.models import EventRecord

# Within the 1 s the live views promise (issue 14), and no oftener: each wake-up of an idle stream
# costs CPU (docs/performance.md item 31).
POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0


class Bell:
    """Rings every open stream of this process when a job finishes anywhere (a same-host socket or
    LISTEN on PostgreSQL, started with the first stream and stopped with the last) or in-process."""

    def __init__(self, channel: str = wakeups.FINISHED):
        self.channel = channel
        self._lock = threading.Lock()
        self._waiters: set[threading.Event] = set()
        self._listener: WakeListener | None = None

    @property
    def subscribers(self) -> int:
        return len(self._waiters)

    def subscribe(self) -> threading.Event:
        waiter = threading.Event()
        with self._lock:
            if not self._waiters:
                self._listener = WakeListener(self.ring, self.channel)
                self._listener.start()
            self._waiters.add(waiter)
        return waiter

    def unsubscribe(self, waiter: threading.Event) -> None:
        with self._lock:
            self._waiters.discard(waiter)
            if self._waiters or self._listener is None:
                return
            listener, self._listener = self._listener, None
        # Outside the lock: stopping joins the listener's thread, which may be waiting in ring().
        listener.stop()

    def ring(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.set()


BELL = Bell()
# Set when the process is asked to stop: open streams end, and new ones end after their opening.
STOPPING = threading.Event()


def stop_streams(bell: Bell | None = None) -> None:
    """End every open stream of this process promptly. Safe in a signal handler (sets an event,
    rings the bell; neither waits for a lock a stream thread holds for long)."""
    STOPPING.set()
    (bell or BELL).ring()


AnyResponse = TypeVar("AnyResponse", bound=HttpResponseBase)


def stream_headers(response: AnyResponse) -> AnyResponse:
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a buffering proxy (nginx) would hold events back
    return response


def frame(row: EventRecord) -> bytes:
    data = row_data(row)
    # A line break in a plugin-chosen type would end the `event:` field early; `data` keeps it exact.
    name = " ".join(data["type"].splitlines())
    return f"id: {row.id}\nevent: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


# What a stream does at each wake-up: the frames to send now, and whether more are already waiting
# (then it polls again at once instead of sleeping).
Poll = Callable[[], tuple[list[bytes], bool]]


def stream(cursor: EventCursor, types: frozenset[str], bell: Bell = BELL) -> Iterator[bytes]:
    """`GET /events`: every row after the cursor, of the wanted types."""

    def poll() -> tuple[list[bytes], bool]:
        rows = next_rows(cursor)
        # Filtered here, not in SQL, so the cursor sees every id and gaps are only real gaps.
        return [frame(row) for row in rows if not types or row.type in types], len(rows) == BATCH

    # The id sets the client's Last-Event-ID before any event arrives, so a reconnect resumes
    # from here rather than from whenever it reconnects.
    return serve(poll, f": stream open\nid: {cursor.last}\n\n".encode(), bell)


def serve(poll: Poll, opening: bytes, bell: Bell = BELL, interval: float = POLL_SECONDS) -> Iterator[bytes]:
    """SSE frames from `poll` at every wake-up (a finished job, or `interval` at the latest) until
    the client goes away (the server's write fails, the WSGI server closes this generator, and
    `finally` lets go of the wake-up) or the process stops (`stop_streams`). A keep-alive comment
    every KEEPALIVE_SECONDS of silence both holds proxies open and finds a dead client within that."""
    waiter = bell.subscribe()
    try:
        yield opening
        quiet_since = time.monotonic()
        while not STOPPING.is_set():
            waiter.clear()  # before reading: a wake-up during the read makes the next wait return
            frames, more = poll()
            yield from frames
            if frames:
                quiet_since = time.monotonic()
            if time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                yield b": keep-alive\n\n"
                quiet_since = time.monotonic()
            if not more:
                waiter.wait(interval)
        yield b": server stopping\n\n"
    finally:
        bell.unsubscribe(waiter)
