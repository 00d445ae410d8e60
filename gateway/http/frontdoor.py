"""The API's gunicorn worker (`worker_class` in ductile_site/gunicorn.py): gunicorn's threaded
worker, with a front door that costs no thread until a request is whole.

Why. gthread hands every readable connection to a thread, which then blocks reading the request.
A client that sends one byte and nothing more (slowloris) holds that thread for as long as it
likes: 40 such connections took every thread of both API processes, and `/healthz` with them
(issue 33). Here the worker's event loop reads each request, head and body, without blocking and
gives it to a thread only once it is all there; a head must arrive within HEAD_SECONDS, a body at
BODY_BYTES_PER_SECOND after BODY_SECONDS, or the connection is closed. When the worker runs out of
connections, the oldest idle or unfinished one is closed to make room, so a flood of slow clients
never stops the worker from accepting (gthread stops accepting at `worker_connections`).

What costs no thread either: an event stream once its headers are sent. The app (the `/events` and
dashboard views) puts a subscription in `environ[STREAM_KEY]`; the wrapper below sends the headers
and hands the socket to the process's stream hub (gateway.http.eventstream.StreamHub), and
gunicorn lets go of the connection.

This module is imported by gunicorn's master, which never loads Django: gunicorn only here.
It leans on gunicorn's internals in a few named places (`TConn`, the parser's unreader,
`enqueue_req`, `finish_request`, the Response behind `start_response`, the request's
`_expected_100_continue`); tests/gateway/http/test_frontdoor.py pins each of them.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, ThreadWorker

from gateway.http.requestframing import Framing, RequestReader

# The head must be whole within this many seconds of its first byte being awaited (Apache's
# mod_reqtimeout allows 20-40 s, nginx 60 s between reads; an API client sends its head at once).
HEAD_SECONDS = 10.0
# A body gets this long, plus a second per BODY_BYTES_PER_SECOND of its length.
BODY_SECONDS = 10.0
BODY_BYTES_PER_SECOND = 64 * 1024
# A body larger than this is not buffered by the loop: the thread reads it (the API refuses most
# such bodies before reading them: Django's DATA_UPLOAD_MAX_MEMORY_SIZE, the webhooks' size cap).
MAX_BUFFERED_BODY = 4 * 1024 * 1024
# Everything the loop buffers at once, across its connections: past it, a body waits in the kernel
# for a thread instead (one slow upload must not be able to hold a worker's memory hostage).
BUFFER_BUDGET = 64 * 1024 * 1024
# Closed first to make room: a connection that has sent nothing for this long (a client sends a
# request as a whole, within milliseconds).
QUIET_SECONDS = 1.0
# A thread's blocking read or write that waits longer than this fails (SO_RCVTIMEO/SO_SNDTIMEO):
# the backstop for what the loop does not buffer, and for a client that stops reading its answer.
SOCKET_SECONDS = 30
# The environ key a view sets to a subscription (`adopt(sock, chunked)`) to be served thread-free.
STREAM_KEY = "ductile.stream"
# Set by this worker: the view may hand its stream over.
DETACH_KEY = "ductile.detach"

_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Reading:
    """A connection whose request is still arriving, read by the worker's loop."""

    def __init__(self, conn: Any, now: float) -> None:
        self.conn = conn
        self.reader = RequestReader(MAX_BUFFERED_BODY)
        self.deadline = now + HEAD_SECONDS
        self.heard = now  # when it was accepted, or last sent a byte

    def feed(self, data: bytes, now: float) -> Framing:
        had_head = bool(self.reader.head_end)
        self.heard = now
        framing = self.reader.feed(data)
        if not had_head and self.reader.head_end:
            end = self.reader.body_end
            # A chunked body's length is unknown until it ends: it gets the largest body's time.
            body = MAX_BUFFERED_BODY if end is None else end - self.reader.head_end
            self.deadline = now + BODY_SECONDS + body / BODY_BYTES_PER_SECOND
        return framing


class FrontDoorWorker(ThreadWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading: dict[Any, Reading] = {}  # insertion order: oldest first
        self.buffered = 0
        self.detached: set[socket.socket] = set()
        self._expired_at = 0.0

    def init_process(self) -> None:
        _raise_descriptor_limit(self.cfg.worker_connections + 256)
        super().init_process()

    def run(self) -> None:
        super().run()
        # Streams the hub serves are no connections of gthread's: its graceful stop does not wait
        # for them. They end here, with their last comment, before the process exits.
        streams = sys.modules.get("gateway.http.eventstream")
        if streams is not None:
            streams.end_streams()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi: Callable[..., Iterable[bytes]] = _Detaching(self.wsgi, self.detached)

    # -- the loop's side: reading requests ---------------------------------------------------

    def enqueue_req(self, conn: Any) -> None:
        """Every way into a thread passes here (a new connection, a kept-alive one readable again,
        bytes read ahead by the last request): read the request first, in the loop."""
        reading = Reading(conn, time.monotonic())
        self.reading[conn] = reading
        leftover = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        if leftover and self._feed(reading, leftover):
            return
        conn.sock.setblocking(False)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, reading))

    def _readable(self, reading: Reading, sock: socket.socket) -> None:
        if self.reading.get(reading.conn) is not reading:
            return  # closed earlier in this pass of the loop: its event was already in hand
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(reading)  # the client went away before its request was whole
            return
        self._feed(reading, data)

    def _feed(self, reading: Reading, data: bytes) -> bool:
        """Feed bytes read; True once the request left the loop (to a thread, or refused)."""
        before = len(reading.reader.buffer)
        framing = reading.feed(data, time.monotonic())
        self.buffered += len(reading.reader.buffer) - before
        if framing is Framing.MORE and self.buffered > BUFFER_BUDGET:
            framing = Framing.PARSE  # the thread reads the rest, behind SOCKET_SECONDS
        if framing is Framing.TOO_LARGE:
            self._refuse(reading, _TOO_LARGE)
            return True
        if framing is Framing.MORE:
            if reading.reader.wants_continue and not getattr(reading.conn, "continued", False):
                self._send_continue(reading)
            return False
        self._to_thread(reading)
        return True

    def _send_continue(self, reading: Reading) -> None:
        """Answer `Expect: 100-continue` here: the client waits for it (curl for 1 s) before its
        body, which the loop is waiting for. The header is then taken out, so gunicorn does not
        answer it a second time."""
        try:
            reading.conn.sock.send(_CONTINUE)
        except OSError:
            return
        reading.conn.continued = True

    def _to_thread(self, reading: Reading) -> None:
        conn = reading.conn
        self._forget(reading)
        continued = getattr(conn, "continued", False)
        conn.prefetched = reading.reader.without_expectation() if continued else bytes(reading.reader.buffer)
        conn.data_ready = True  # gthread must not wait for more data before parsing
        super().enqueue_req(conn)

    def _refuse(self, reading: Reading, answer: bytes) -> None:
        try:
            reading.conn.sock.send(answer)
        except OSError:
            pass
        self._drop(reading)

    def _give_up(self, reading: Reading) -> None:
        """A request not whole in time (or in the way of a newer one): 408 when it had begun."""
        self._refuse(reading, _TIMED_OUT if reading.reader.buffer else b"")

    def _drop(self, reading: Reading) -> None:
        self._forget(reading)
        self.nr_conns -= 1
        reading.conn.close()

    def _forget(self, reading: Reading) -> None:
        if self.reading.pop(reading.conn, None) is None:
            return
        self.buffered -= len(reading.reader.buffer)
        try:
            self.poller.unregister(reading.conn.sock)
        except (KeyError, ValueError, OSError):
            pass

    def murder_pending(self) -> None:
        """Called by gthread's loop after every pass: also close requests past their deadline. A
        stopping worker gives unfinished requests what gthread gives its kept-alive connections
        (STOP_KEEPALIVE_LINGER), not their whole deadline: its stop waits for every connection."""
        super().murder_pending()
        now = time.monotonic()
        if not self.alive:
            for reading in self.reading.values():
                reading.deadline = min(reading.deadline, now + STOP_KEEPALIVE_LINGER)
            self._expired_at = float("-inf")
        if now - self._expired_at < 0.25:
            return  # a scan per pass would cost O(connections) per request under load
        self._expired_at = now
        for reading in [r for r in self.reading.values() if r.deadline <= now]:
            self._give_up(reading)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        """Wake for the first reading deadline too, not only at the loop's own interval."""
        if self.reading:
            first = min(reading.deadline for reading in self.reading.values())
            timeout = max(min(timeout, first - time.monotonic() + 0.01), 0.0)
        super().wait_for_and_dispatch_events(timeout)
        # After the pass, not in `accept`: a connection closed while the pass's events are being
        # dispatched may still have one of them coming, and gthread's handler of a kept-alive
        # connection's event fails on a closed socket, taking the whole worker down.
        self._make_room()

    def _make_room(self) -> None:
        """Keep a free connection for the next client: close the oldest idle kept-alive connection,
        else the quietest unfinished request. Without this, gthread stops accepting when
        `worker_connections` are open, and slow clients would lock everyone out."""
        while self.nr_conns >= self.worker_connections - 1:
            if self.keepalived_conns:
                conn = self.keepalived_conns.popleft()
                try:
                    self.poller.unregister(conn.sock)
                except (KeyError, ValueError, OSError):
                    pass
                self.nr_conns -= 1
                conn.close()
            elif self.reading:
                candidate = self._quietest()
                if _waiting(candidate.conn.sock):
                    # Bytes in the kernel the loop has not read yet: the client is not quiet,
                    # the loop is late (a burst of accepts). Read them; it may be whole now.
                    self._readable(candidate, candidate.conn.sock)
                else:
                    self._give_up(candidate)
            else:
                return  # every connection is in a thread: gthread waits for one to finish

    def _quietest(self) -> Reading:
        """Which unfinished request to close for room: the oldest that has sent nothing for
        QUIET_SECONDS, else the oldest. Not simply the oldest: in a burst of new connections a
        client that connected a moment before the burst, and whose request the loop has not read
        yet, would be the oldest (seen as a reset probe in the tests on a busy machine)."""
        now = time.monotonic()
        readings = iter(self.reading.values())
        oldest = next(readings)
        if now - oldest.heard >= QUIET_SECONDS:
            return oldest
        return next((r for r in readings if now - r.heard >= QUIET_SECONDS), oldest)

    # -- the thread's side --------------------------------------------------------------------

    def handle(self, conn: Any) -> Any:
        data = conn.__dict__.pop("prefetched", None)
        if data is not None:
            _set_socket_timeouts(conn.sock)
            conn.sock.setblocking(True)
            conn.init()
            conn.parser.unreader.unread(data)
        return super().handle(conn)

    def handle_request(self, req: Any, conn: Any) -> Any:
        if conn.__dict__.pop("continued", False):
            req._expected_100_continue = False  # answered by the loop (_send_continue)
        return super().handle_request(req, conn)

    def finish_request(self, conn: Any, fs: Any) -> None:
        if conn.sock in self.detached:
            # A stream handed to the hub: the connection is the hub's now, gunicorn must not
            # close it (nor keep it alive).
            self.detached.discard(conn.sock)
            self.nr_conns -= 1
            return
        super().finish_request(conn, fs)


class _Detaching:
    """The WSGI app, with the hand-over of event streams: when the view put a subscription in
    `environ[STREAM_KEY]`, the response's headers are sent here and the socket goes to the hub.
    gunicorn then writes nothing more (its Response is told the body is not chunked, so no closing
    chunk, and to close), and its `finish_request` leaves the socket to the hub."""

    def __init__(self, app: Callable[..., Iterable[bytes]], detached: set[socket.socket]) -> None:
        self.app = app
        self.detached = detached

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ[DETACH_KEY] = True
        result = self.app(environ, start_response)
        subscription = environ.get(STREAM_KEY)
        if subscription is None:
            return result
        response = getattr(start_response, "__self__")  # noqa: B009 - gunicorn's Response (tests pin it)
        sock = environ["gunicorn.socket"]
        try:
            response.send_headers()
        except OSError:
            _close(result)
            raise
        chunked = response.chunked
        response.chunked = False
        response.force_close()
        self.detached.add(sock)
        subscription.adopt(sock, chunked)
        _close(result)
        return ()


def _waiting(sock: socket.socket) -> bool:
    """Whether bytes wait unread in `sock` (non-blocking)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return False


def _close(result: Iterable[bytes]) -> None:
    close = getattr(result, "close", None)
    if close is not None:
        close()


def _set_socket_timeouts(sock: socket.socket) -> None:
    """Kernel timeouts on a thread's blocking reads and writes (Python's blocking mode leaves them
    alone): a read or write stalled SOCKET_SECONDS fails instead of holding the thread."""
    value = struct.pack("ll", SOCKET_SECONDS, 0)
    for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, value)
        except OSError as exc:
            if exc.errno != errno.EBADF:
                raise


def _raise_descriptor_limit(wanted: int) -> None:
    """Each connection is a descriptor: make sure `worker_connections` of them fit under the soft
    limit (the hard limit permitting)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
