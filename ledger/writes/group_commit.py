"""Group commit: `shared()` writes of many threads in one transaction.

In a process with many writing threads (the API's gunicorn workers), each holding the gate through
its own BEGIN...COMMIT while it waits for the GIL, writers queued behind one another for up to
140 ms (docs/hot-path-profile-history.md, "API while workers drain"). After `share_transactions()`
one writer thread runs every thread's write of the moment in one transaction.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import DatabaseError, connection

from ledger import django_internals as django
from ledger.writes.transaction import writing


def refused_commit(exc: BaseException) -> bool:
    """Whether the database said the COMMIT was not made: SQLite answers SQLITE_FULL before it
    writes the commit record to the WAL (and rolls the transaction back), so
    a full disk at COMMIT recorded nothing, however the lent connection is closed after it
    (tests/reliability/test_disk_full.py pins that). Without this, a write whose disk filled at
    its COMMIT rather than at an INSERT answered "it may have been recorded"."""
    return getattr(exc.__cause__, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


class CommitUnknown(DatabaseError):
    """A write whose COMMIT was sent but never answered: the connection went (a PostgreSQL
    restart), so the write may have been recorded or not. Unlike any other error of a write, it
    must not be taken for "nothing was recorded"."""


# Guards `_writer`.
_sharing = threading.Lock()

T = TypeVar("T")


@dataclass
class _Call:
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class _Writer:
    """One thread that runs every thread's write of the process: all the calls waiting when it
    starts a transaction go into that one transaction, and every caller is answered after the
    commit. Why: with many request threads, each holding the gate through its own BEGIN...COMMIT
    while it waits for the GIL, writers queued behind one another for up to 140 ms
    (docs/hot-path-profile-history.md, "API while workers drain"); one writer holds the gate once for all
    of them.

    One call's error is that call's alone, without a savepoint around each call: a savepoint and
    its release cost ~0.12 ms of the writer's ~0.6 ms per call at 500 requests/s, a fifth, while
    calls fail rarely (docs/performance-history.md, item 49). A transaction one of its calls (or its
    COMMIT) failed is rolled back as a whole, and each of its calls is run again in a transaction
    of its own. So a call may run twice, the first time rolled back: its effects outside the
    ledger (a wake-up poke, a log line) must bear that."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="ductile-ledger-writer", daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[], T]) -> T:
        call = _Call(fn)
        self._calls.put(call)
        while not call.done.wait(1.0):
            if not self._thread.is_alive():  # never wait for ever on a writer that is gone
                raise RuntimeError("the ledger's writer thread has stopped; the write was not made")
        if call.error is not None:
            raise call.error
        result: T = call.result
        return result

    def stop(self) -> None:
        self._calls.put(None)
        self._thread.join()

    def _run(self) -> None:
        try:
            while (first := self._calls.get()) is not None:
                calls = [first]
                while True:
                    try:
                        more = self._calls.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._calls.put(None)  # stop after this transaction
                        break
                    calls.append(more)
                self._commit(calls)
        finally:
            connection.close()

    def _commit(self, calls: list[_Call], *, reconnected: bool = False) -> None:
        held = connection.connection
        ran = False
        try:
            with writing():
                for call in calls:
                    call.result = call.fn()
                ran = True
        except BaseException as exc:  # the caller's to handle, whatever it is
            connection.close_if_unusable_or_obsolete()
            # Django replaces a connection it could not even roll back on: it was lost.
            lost = isinstance(exc, DatabaseError) and connection.connection is not held
            if lost and not ran and not reconnected:
                # The connection was dead before anything could commit (a PostgreSQL restart ends
                # every client's connection, and this thread, unlike a request's, is never checked
                # between uses): the same calls once more, on a new connection. Why not check it
                # before each transaction (Django's CONN_HEALTH_CHECKS): a `SELECT 1` per batch, a
                # round trip on every write of a healthy database, for what happens at a restart.
                for call in calls:
                    call.result = None
                self._commit(calls, reconnected=True)
            elif lost and ran and not refused_commit(exc):
                # The connection went during the COMMIT: whether it was made, nobody here knows.
                # Running the calls again could record them twice; each caller is told so.
                for call in calls:
                    call.error = CommitUnknown(f"the database connection was lost while committing: {exc}")
                    call.error.__cause__ = exc
            elif len(calls) == 1:
                calls[0].error = exc
            else:  # nothing of any call was kept: each again, alone (the class's docstring)
                for call in calls:
                    call.result = None
                    self._commit([call])
        finally:
            for call in calls:
                call.done.set()


_writer: _Writer | None = None

# How long a thread may keep the GIL while another waits for it (Python's default: 5 ms).
GIL_SWITCH_SECONDS = 0.0005


def hand_the_gil_back_sooner() -> None:
    """For processes whose threads write: a thread holding the write gate that loses the GIL to
    another thread of its process keeps every writer waiting until it gets it back, and a thread
    whose plugin has exited waits for the GIL while the cores it could keep busy idle.

    The API's gunicorn workers (16 threads): at the default 5 ms the slowest requests spent 95 %
    of their time queued behind such a holder (docs/hot-path-profile-history.md, "API while workers
    drain"); at 0.5 ms the API's p99 with workers draining went from 229 to 74 ms. `runworkers`
    (2 threads): 675.7 -> 699.7 jobs/s, 6 interleaved runs of 2,000 jobs each (docs/performance-history.md,
    item 40)."""
    sys.setswitchinterval(GIL_SWITCH_SECONDS)


def share_transactions() -> None:
    """From now on `shared()` calls of this process's threads are committed together by one writer
    thread. For processes with many writing threads (the API's gunicorn workers)."""
    global _writer
    with _sharing:
        if _writer is None or _writer._pid != os.getpid():
            _writer = _Writer()


def stop_sharing() -> None:
    """Back to a transaction per call; the writer thread ends (its connection closed)."""
    global _writer
    with _sharing:
        writer, _writer = _writer, None
    if writer is not None and writer._pid == os.getpid():
        writer.stop()


def shared(fn: Callable[[], T]) -> T:
    """`fn()` in a write transaction: its own (`writing()`), or, after `share_transactions()`, one
    it shares with the other threads' calls of the moment. Returns after the commit either way."""
    writer = _writer
    # Inside a transaction already (a caller's writing(), or one it must not wait outside of): join
    # it, as writing() does; the writer thread could never see it.
    if writer is None or writer._pid != os.getpid() or django.in_transaction(connection):
        with writing():
            return fn()
    return writer.call(fn)
