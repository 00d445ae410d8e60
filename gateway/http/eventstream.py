"""`GET /events` and the dashboard's streams: Server-Sent Events of the live ledger, resumable by
row id. The rows come from gateway/reports/events.py (the cursor and why it watches gaps).

Who serves a stream. Under the gateway's own gunicorn worker (gateway/http/frontdoor.py) every
open stream of a process is served by one thread, the `StreamHub`: the view hands its
`Subscription` over and no request thread is held while a client listens (20 idle subscribers
used to take every thread and the health checks with them, issue 33). Under any other WSGI server
(Django's test server, another gunicorn worker class) the same subscription is a plain streaming
response that holds its thread, as before.

Waking. A stream polls its feed when a job finishes anywhere (the Bell: jobs write their events in
the transaction that finishes them) and at least every `interval`, which also covers events
written without a finish (retries). Between those, a feed reads the database only when the
ledger's change marker moved (gateway.reports.live.CLOCK, one read per half second for the whole
process), and feeds at the same cursor share one query per pass (`memo`): 200 idle subscribers
cost what one does.

Stopping. The server's stop signal calls `stop_streams()` (ductile_site/gunicorn.py), which ends
every stream of the process at once: each sends a last comment and ends cleanly (the chunked
terminator), and a client reconnects with Last-Event-ID to the next server.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from django.db import close_old_connections
from django.http.response import HttpResponseBase, StreamingHttpResponse

from gateway.config.model import GatewayConfig
from gateway.http.frontdoor import DETACH_KEY, STREAM_KEY
from gateway.http.streamseats import Refusal, seats_beside
from gateway.logs import logger
from gateway.reports import events, live
from gateway.reports.events import BATCH, EventCursor, row_data
from gateway.storage.wake_listener import WakeListener
from ledger import job_notifications
from ledger.models import EventRecord

log = logger("streams")

# Within the 1 s the live views promise (issue 14), and no oftener: each wake-up of an idle stream
# costs CPU (docs/performance-history.md item 31).
POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0
# A finished job wakes the streams at once, but a stream polls at most this often for it: at
# hundreds of jobs a second, a poll per finish would be a query per finish per distinct cursor.
MIN_POLL_SPACING = 0.1
# A client that reads slower than its stream is written is let go past this much unsent output
# (it reconnects with Last-Event-ID and catches up from the ledger).
MAX_BACKLOG = 1024 * 1024
# After a feed's poll failed (the database is away), its next try.
RETRY_SECONDS = 2.0


class Waiter(Protocol):
    def set(self) -> None: ...


class Bell:
    """Rings every open stream of this process when a job finishes anywhere (a same-host socket or
    LISTEN on PostgreSQL, started with the first stream and stopped with the last) or in-process."""

    def __init__(self, channel: str = job_notifications.FINISHED):
        self.channel = channel
        self._lock = threading.Lock()
        self._waiters: set[Waiter] = set()
        self._listener: WakeListener | None = None

    @property
    def subscribers(self) -> int:
        return len(self._waiters)

    def subscribe(self, waiter: Waiter) -> None:
        with self._lock:
            if not self._waiters:
                self._listener = WakeListener(self.ring, self.channel)
                self._listener.start()
            self._waiters.add(waiter)

    def unsubscribe(self, waiter: Waiter) -> None:
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
STOPPING_FRAME = b": server stopping\n\n"


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


class Feed(Protocol):
    """What a stream sends: its first bytes, then at each poll the frames due now and whether more
    are already waiting (then it polls again at once). `memo` is shared by every feed polled in the
    same pass (equal queries are asked once); `rung`: a job finished since the last poll."""

    opening: bytes
    interval: float

    def poll(self, memo: dict[Any, Any], rung: bool) -> tuple[list[bytes], bool]: ...


class EventFeed:
    """`GET /events`: every row after the cursor, of the wanted types."""

    def __init__(self, cursor: EventCursor, types: frozenset[str], clock: live.LedgerClock | None = None):
        self.cursor, self.types, self.clock = cursor, types, clock or live.CLOCK
        self.interval = POLL_SECONDS
        # The id sets the client's Last-Event-ID before any event arrives, so a reconnect resumes
        # from here rather than from whenever it reconnects.
        self.opening = f": stream open\nid: {cursor.last}\n\n".encode()
        self._generation: int | None = None
        self._behind = False

    def poll(self, memo: dict[Any, Any], rung: bool) -> tuple[list[bytes], bool]:
        if not (rung or self._behind or self.cursor.gaps):
            generation = self.clock.tick()
            if generation == self._generation:
                return [], False  # the ledger has not moved: no new row to look for
            self._generation = generation
        rows = events.next_rows(self.cursor, memo)
        self._behind = len(rows) == BATCH
        # Filtered here, not in SQL, so the cursor sees every id and gaps are only real gaps.
        wanted = [row for row in rows if not self.types or row.type in self.types]
        return [_framed(row, memo) for row in wanted], self._behind


def _framed(row: EventRecord, memo: dict[Any, Any]) -> bytes:
    key = ("frame", row.id)
    text = memo.get(key)
    if text is None:
        text = memo[key] = frame(row)
    return text


class Subscription:
    """One client's stream: served by the hub once `adopt`ed (gateway/http/frontdoor.py), else
    iterated by the WSGI server's thread. `release` (its seat, gateway/http/streamseats.py) is
    called once, when the stream ends either way."""

    def __init__(self, feed: Feed, release: Callable[[], None] = lambda: None, bell: Bell = BELL) -> None:
        self.feed, self.bell = feed, bell
        self._release: Callable[[], None] | None = release
        self._served: Iterator[bytes] | None = None
        self.adopted = False

    def adopt(self, sock: socket.socket, chunked: bool) -> None:
        self.adopted = True
        hub().adopt(_Client(sock, chunked, self))

    def __iter__(self) -> Iterator[bytes]:
        self._served = serve(self.feed, self.bell)
        return self._served

    def close(self) -> None:
        """The response's end (Django calls it): a stream the hub took lives on."""
        if self._served is not None:
            self._served.close()  # type: ignore[attr-defined]
        if not self.adopted:
            self.released()

    def released(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


def open_stream(meta: dict[str, Any], feed: Feed, holder: str, config: GatewayConfig) -> HttpResponseBase | Refusal:
    """The streaming response for `feed`, with a seat for `holder` (a token's or a person's name),
    or why there is none. Under the front door (`meta`, the WSGI environ, says so) the stream is
    handed to the hub after its headers; elsewhere the response is iterated by its thread."""
    seat = seats_beside(config.state_path).take(
        holder, per_holder=config.api.max_streams_per_token, total=config.api.max_streams
    )
    if isinstance(seat, Refusal):
        return seat
    subscription = Subscription(feed, seat)
    if meta.get(DETACH_KEY):
        meta[STREAM_KEY] = subscription
    return stream_headers(StreamingHttpResponse(subscription, content_type="text/event-stream"))


def serve(feed: Feed, bell: Bell = BELL) -> Iterator[bytes]:
    """A stream on its own thread: frames from `feed` at every wake-up (a finished job, or the
    feed's interval at the latest) until the client goes away (the server's write fails, the WSGI
    server closes this generator, and `finally` lets go of the wake-up) or the process stops
    (`stop_streams`). A keep-alive comment every KEEPALIVE_SECONDS of silence both holds proxies
    open and finds a dead client within that."""
    waiter = threading.Event()
    bell.subscribe(waiter)
    try:
        yield feed.opening
        quiet_since = time.monotonic()
        rung = False
        while not STOPPING.is_set():
            waiter.clear()  # before reading: a wake-up during the read makes the next wait return
            frames, more = feed.poll({}, rung)
            yield from frames
            if frames:
                quiet_since = time.monotonic()
            if time.monotonic() - quiet_since >= KEEPALIVE_SECONDS:
                yield b": keep-alive\n\n"
                quiet_since = time.monotonic()
            rung = True if more else waiter.wait(feed.interval)
        yield STOPPING_FRAME
    finally:
        bell.unsubscribe(waiter)


@dataclass(eq=False)
class _Client:
    sock: socket.socket
    chunked: bool
    subscription: Subscription
    out: bytearray = field(default_factory=bytearray)
    next_poll: float = 0.0
    polled: float = float("-inf")
    quiet_since: float = field(default_factory=time.monotonic)
    failing: bool = False

    def queue(self, data: bytes) -> None:
        if self.chunked:
            self.out += b"%X\r\n" % len(data) + data + b"\r\n"
        else:
            self.out += data


class StreamHub:
    """Every adopted stream of this process, served by one thread with non-blocking sockets. The
    thread starts with the first stream handed over and then lives as long as the process: with
    no stream it waits on its wake-up pipe, costing nothing; it is the Bell's waiter (one for all
    its streams) only while it has a stream, so the wake-up listener stops with the last one."""

    def __init__(self, bell: Bell = BELL) -> None:
        self.bell = bell
        self._lock = threading.Lock()
        self._incoming: list[_Client] = []
        self._thread: threading.Thread | None = None
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._rung = False
        self.ended = threading.Event()  # set once the process stops and every stream was ended
        # Only the hub's thread touches these.
        self.clients: dict[socket.socket, _Client] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_read, selectors.EVENT_READ)

    def adopt(self, client: _Client) -> None:
        with self._lock:
            self._incoming.append(client)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stream-hub", daemon=True)
                self._thread.start()
        self._wake()

    def set(self) -> None:
        """The Bell rang: poll every stream (at most MIN_POLL_SPACING after its last poll)."""
        self._rung = True
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the hub is woken already

    def _run(self) -> None:
        ringing = False
        while True:
            self._take_incoming()
            if bool(self.clients) != ringing:
                ringing = bool(self.clients)
                (self.bell.subscribe if ringing else self.bell.unsubscribe)(self)
            try:
                self._pass()
            except Exception:
                log.exception("the stream hub failed; its streams end (clients reconnect with Last-Event-ID)")
                for client in list(self.clients.values()):
                    self._drop(client)

    def _take_incoming(self) -> None:
        with self._lock:
            incoming, self._incoming = self._incoming, []
        for client in incoming:
            client.sock.setblocking(False)
            self.clients[client.sock] = client
            self._selector.register(client.sock, selectors.EVENT_READ, client)
            client.queue(client.subscription.feed.opening)

    def _pass(self) -> None:
        if STOPPING.is_set():
            for client in list(self.clients.values()):
                self._end(client)
            self.ended.set()
        now = time.monotonic()
        rung, self._rung = self._rung, False
        due = [c for c in self.clients.values() if now >= c.next_poll or (rung and now - c.polled >= MIN_POLL_SPACING)]
        if due:
            close_old_connections()  # a connection a database outage broke is replaced here
            memo: dict[Any, Any] = {}
            for client in due:
                self._poll(client, memo, rung, now)
        for client in list(self.clients.values()):
            if now - client.quiet_since >= KEEPALIVE_SECONDS:
                client.queue(b": keep-alive\n\n")
                client.quiet_since = now
            if client.out:
                self._flush(client)
        self._wait()

    def _poll(self, client: _Client, memo: dict[Any, Any], rung: bool, now: float) -> None:
        feed = client.subscription.feed
        try:
            frames, more = feed.poll(memo, rung)
        except Exception:
            # The database is away: the stream waits for it (its cursor kept) instead of ending.
            if not client.failing:
                log.warning("a stream could not read the ledger; retrying every %.0fs", RETRY_SECONDS, exc_info=True)
            client.failing, client.next_poll = True, now + RETRY_SECONDS
            return
        client.failing = False
        client.polled, client.next_poll = now, now if more else now + feed.interval
        for data in frames:
            client.queue(data)
        if frames:
            client.quiet_since = now

    def _wait(self) -> None:
        """Until the next poll or keep-alive is due, a socket is ready, or the hub is woken."""
        timeout = None
        if self.clients:
            due = min(min(c.next_poll, c.quiet_since + KEEPALIVE_SECONDS) for c in self.clients.values())
            timeout = max(due - time.monotonic(), 0.0)
        for key, mask in self._selector.select(timeout):
            client = key.data
            if client is None:
                _drain(self._wake_read)
            elif mask & selectors.EVENT_READ and not _still_open(client.sock):
                self._drop(client)
            elif mask & selectors.EVENT_WRITE:
                self._flush(client)

    def _flush(self, client: _Client) -> None:
        try:
            sent = client.sock.send(client.out)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._drop(client)  # the client went away
            return
        del client.out[:sent]
        if len(client.out) > MAX_BACKLOG:
            log.info("a stream's client read too slowly (%d bytes unsent): let go", len(client.out))
            self._drop(client)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.out else 0)
        self._selector.modify(client.sock, events, client)

    def _end(self, client: _Client) -> None:
        """The server stops: the last comment and the body's end, then the connection closes."""
        client.queue(STOPPING_FRAME)
        if client.chunked:
            client.out += b"0\r\n\r\n"
        try:
            client.sock.send(client.out)  # once, without waiting: a client that reads nothing gets cut off
        except OSError:
            pass
        self._drop(client)

    def _drop(self, client: _Client) -> None:
        if self.clients.pop(client.sock, None) is None:
            return
        try:
            self._selector.unregister(client.sock)
        except (KeyError, ValueError):
            pass
        try:
            client.sock.close()
        finally:
            client.subscription.released()


def _still_open(sock: socket.socket) -> bool:
    """A stream's client sends nothing; readable means it closed (or sent bytes, discarded)."""
    try:
        return bool(sock.recv(4096))
    except BlockingIOError:
        return True
    except OSError:
        return False


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


_HUB: StreamHub | None = None
_HUB_LOCK = threading.Lock()


def end_streams(timeout: float = 2.0) -> None:
    """A stopping worker, after its last request (gateway/http/frontdoor.py): end every stream the
    hub serves, and wait (at most `timeout`) until it has, or the process would exit under them."""
    stop_streams()
    if _HUB is not None and _HUB._thread is not None:
        _HUB.ended.wait(timeout)


def hub() -> StreamHub:
    """This process's hub, made at the first stream handed over."""
    global _HUB
    with _HUB_LOCK:
        if _HUB is None:
            _HUB = StreamHub()
        return _HUB
