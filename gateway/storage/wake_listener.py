"""Cross-process wake-ups so an idle worker starts a new job, and a synchronous caller sees its
tree finish, within milliseconds: `WakeListener` hears the ledger's job notifications
(ledger/job_notifications.py) from this process and others.

Same host: each listener binds a UNIX datagram socket in a short per-database directory, named
by what it waits for (`.sock` for workers, `.wait` for tree waiters); the process that enqueues
or finishes a job sends one byte to each after commit. PostgreSQL (any node): LISTEN on the
channel the transaction NOTIFYs. Both are advice; listeners still re-check the database.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings

from gateway.logs import logger
from gateway.storage.outage import Outage
from ledger import job_notifications

log = logger("wakeup")


def wake_directory() -> Path | None:
    """A short per-database directory: AF_UNIX socket paths are limited to 108 bytes, so it cannot
    live beside a deeply nested database file."""
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("sqlite3"):
        return None
    return _directory_of(str(db["NAME"]))


@cache
def _directory_of(database: str) -> Path:
    # Cached: every enqueue and every finish pokes, and resolving the path costs a stat per part.
    digest = hashlib.blake2b(str(Path(database).resolve()).encode(), digest_size=8).hexdigest()
    return Path(tempfile.gettempdir()) / f"ductile-{os.getuid()}-{digest}"


# Socket name suffix per channel: enqueue pokes wake workers, finish pokes wake tree waiters.
SUFFIX = {job_notifications.ENQUEUED: ".sock", job_notifications.FINISHED: ".wait"}


def poke_local_workers() -> None:
    _poke_local(SUFFIX[job_notifications.ENQUEUED])


def poke_local_waiters() -> None:
    _poke_local(SUFFIX[job_notifications.FINISHED])


def _poke_local(suffix: str) -> None:
    directory = wake_directory()
    if directory is None:
        return
    entries = _listing(str(directory))
    if entries is None:
        return
    sock = _poke_socket()
    # This process's own listeners (a listener's socket is named after the pid that bound it) are
    # called in-process (`WakeListener.start`): a poke would only wake the listener's thread to call
    # them again. In `runworkers` that was a third thread, and a second wake of every worker thread,
    # contending for the GIL with the thread about to spawn the next pipeline step.
    own = f"{os.getpid()}-"
    for name, path in entries:
        if not name.endswith(suffix) or name.startswith(own):
            continue
        try:
            sock.sendto(b"!", path)
        except (ConnectionRefusedError, FileNotFoundError):
            _unlink(path)  # a listener that died without cleaning up
        except (BlockingIOError, OSError):
            pass  # its buffer is full of pokes already: it is awake


# Per directory: its (inode, mtime), when it was listed, and its entries (name, path). Every finished job
# pokes, and listing the directory cost more than the pokes (~25 µs of the daemon's CPU per job).
_listings: dict[str, tuple[tuple[int, int], int, list[tuple[str, str]]]] = {}
# A listing is reused while the directory's mtime is the one it was taken under, and only if it was
# taken this long after that mtime: the kernel stamps a directory from a coarse clock, so a socket
# bound within the same tick as the change before it leaves the mtime as it was, and a listing
# taken in that tick would miss it for good (git's "racy clean" problem, again).
_RACY_NS = 50_000_000


def _listing(directory: str) -> list[tuple[str, str]] | None:
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return None
    stamp = (st.st_ino, st.st_mtime_ns)  # the inode too: the last listener out removes the directory
    kept = _listings.get(directory)
    if kept is not None and kept[0] == stamp and kept[1] - st.st_mtime_ns > _RACY_NS:
        return kept[2]
    taken = time.time_ns()
    try:
        entries = [(entry.name, entry.path) for entry in os.scandir(directory)]
    except FileNotFoundError:
        return None
    _listings[directory] = (stamp, taken, entries)
    return entries


_sender: tuple[int, socket.socket] | None = None


def _poke_socket() -> socket.socket:
    """One unbound datagram socket per process for every poke (sendto is safe from any thread); a
    forked child makes its own."""
    global _sender
    if _sender is None or _sender[0] != os.getpid():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        _sender = (os.getpid(), sock)
    return _sender[1]


class WakeListener:
    """Receives one channel's wake-ups (enqueued: a worker process; finished: a tree waiter) and
    calls `on_wake` for each: those of other processes through its socket, those of this process
    directly (a listener of `ledger.job_notifications`, called after the commit)."""

    def __init__(
        self,
        on_wake: Callable[[], None],
        channel: str = job_notifications.ENQUEUED,
        *,
        on_poke: Callable[[], None] | None = None,
    ):
        self.on_wake = on_wake
        # Another process's wake-up (its poke, or a NOTIFY), when the listener tells it apart.
        self.on_poke = on_poke or on_wake
        self.channel = channel
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sock: socket.socket | None = None
        self._path: str | None = None

    def start(self) -> None:
        job_notifications.add_listener(self.on_wake, self.channel)
        try:
            self._start()
        except OSError as exc:  # wake-ups are advice: without them the bounded re-check still works
            log.warning("wake-up listener unavailable (%s); relying on the database re-check", exc)

    def _start(self) -> None:
        directory = wake_directory()
        if directory is not None:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._path = str(directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX[self.channel]}")
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.bind(self._path)
            self._spawn(self._socket_loop)
        elif settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
            self._spawn(self._listen_loop)

    def stop(self) -> None:
        job_notifications.remove_listener(self.on_wake, self.channel)
        self._stop.set()
        if self._sock is not None:
            # The loop blocks in recv() with no timeout (a timeout woke every idle process twice a
            # second, docs/performance-history.md item 31); shutting the socket down ends that recv at once.
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            for thread in self._threads:
                thread.join(timeout=2)
        # A LISTEN thread is not joined: it notices the flag within its 0.5 s poll and closes its
        # own connection; a caller must not wait for that.
        if self._sock is not None:
            self._sock.close()
        if self._path:
            _unlink(self._path)
            try:
                os.rmdir(os.path.dirname(self._path))  # the last listener out removes the directory
            except OSError:
                pass

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name="ductile-wake", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _socket_loop(self) -> None:
        assert self._sock is not None
        while True:
            try:
                self._sock.recv(64)
            except OSError:
                return
            if self._stop.is_set():
                return
            self.on_poke()

    def _listen_loop(self) -> None:
        # Not at import: on PostgreSQL alone. A web process on SQLite marks psycopg absent
        # (gateway.bootstrap.leave_postgres_driver_unloaded: 10 MB of each API worker).
        import psycopg

        # Said once when the connection is lost and once when it is back, not at every attempt:
        # while the server is down, that was a warning a second from each listener.
        down = Outage(f"listening for {self.channel} wake-ups", log, floor=0.5, ceiling=2.0)
        while not self._stop.is_set():
            try:
                with psycopg.connect(**_pg_params(), autocommit=True) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    down.recovered()
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            self.on_poke()
            except Exception as exc:  # the bounded re-check covers us while we reconnect
                self._stop.wait(down.failed(exc))


def _pg_params() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    params = {
        "dbname": db["NAME"],
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
    }
    return {k: v for k, v in params.items() if v}


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
