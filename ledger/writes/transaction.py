"""Every write transaction of the ledger: one SQLite writer at a time, waiting in the kernel
rather than in SQLite's busy handler.

SQLite lets one transaction write at a time. A second `BEGIN IMMEDIATE` waits in SQLite's busy
handler, which retries after sleeps that grow to 100 ms: under load a waiter keeps losing the lock
to newcomers that arrive while it sleeps, and a few requests wait for seconds while the rest take
a millisecond (docs/performance.md, "API"). Behind this gate, writers wait on a lock that hands
over at release: a thread lock inside the process, then an exclusive `flock` on a file beside the
database across the host's processes.

`writing()` is the only way the ledger's write methods open a transaction, so no caller can forget
the gate: it takes the gate, then `transaction.atomic()`, and releases the gate after the
transaction (and its commit hooks) ended; what `after_release` was given runs after that. It is
re-entrant: a write method called inside another (children enqueued by a completion) or inside a
caller's own `writing()` block (several jobs in one transaction) joins that transaction. A write
inside a transaction opened *without* the gate is refused: that transaction already holds SQLite's
write lock, and waiting for the gate while holding it would deadlock against a process holding the
gate and waiting for the lock.

PostgreSQL has row locks and no such handler: there, as on an in-memory SQLite database (which no
other process can open), `writing()` is `transaction.atomic()` alone.
"""

from __future__ import annotations

import fcntl
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ledger.sql import current

log = logging.getLogger("ductile.ledger")

_lock = threading.Lock()
_files: dict[str, tuple[int, int]] = {}  # suffix -> (pid, fd): a forked child opens its own
_held = threading.local()


def after_release(callback: Callable[[], None]) -> None:
    """Run `callback` once the current write transaction has committed and the gate is released;
    never when it rolls back. For wake-up pokes: they need no lock, and run inside the gate they
    lengthened every other writer's wait (docs/performance.md, "API while workers drain")."""
    pending: list[Callable[[], None]] | None = getattr(_held, "after", None)
    if pending is None:  # no gate here (PostgreSQL, an in-memory database): after the commit
        transaction.on_commit(callback)
    else:
        transaction.on_commit(lambda: pending.append(callback))


class UngatedTransaction(RuntimeError):
    """A ledger write inside a transaction that was opened without `writing()`."""


class CommitUnknown(DatabaseError):
    """A write whose COMMIT was sent but never answered: the connection went (a PostgreSQL
    restart), so the write may have been recorded or not. Unlike any other error of a write, it
    must not be taken for "nothing was recorded"."""


def _database(conn: BaseDatabaseWrapper) -> str | None:
    """The SQLite file, or None on another backend or an in-memory database (one process only)."""
    if conn.vendor != "sqlite":
        return None
    name = str(conn.settings_dict["NAME"])
    return None if name == ":memory:" or "mode=memory" in name else name  # as Django tells them apart


def _open_beside(database: str, suffix: str) -> int:
    return os.open(Path(database).with_name(Path(database).name + suffix), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _beside_fd(database: str, suffix: str) -> int:
    """This process's descriptor of a file beside the database: the gate's, the checkpointer's
    (call under `_lock`)."""
    held = _files.get(suffix)
    if held is None or held[0] != os.getpid():
        held = _files[suffix] = (os.getpid(), _open_beside(database, suffix))
    return held[1]


_GATE = ".write-gate"
# Held shared by every process that checkpoints the WAL itself (`checkpoints_elsewhere`): while
# one does, the others' COMMITs leave the checkpoints to it (`_autocheckpoint_pages`).
_CHECKPOINTER = ".checkpointer"

_writer_raw: tuple[int, Any] | None = None  # (pid, sqlite3 connection): a forked child opens its own
# False while a thread of this process checkpoints the WAL itself (`checkpoints_elsewhere`).
_commits_checkpoint = True
# The write connection's `wal_autocheckpoint` as last set; None: to be set at its next transaction.
_writer_pages: int | None = None
# Its value from the settings (their init_command): the backstop when no daemon checkpoints.
_settings_pages = 1000
# While a daemon of the host checkpoints, the automatic checkpoint of the other processes' write
# connections: well past the log's length at which the daemon copies it back
# (gateway.storage.checkpoints.CHECKPOINT_PAGES), so that no COMMIT of theirs does it in the
# daemon's place with the write gate held. Not for an API alone: nobody else checkpoints for it,
# and its in-commit checkpoints grew with the log (p99 at 500 requests/s 44 against 17 ms with
# 20,000 pages; docs/performance.md, item 44).
BESIDE_CHECKPOINTER_PAGES = 20_000
# How long `_autocheckpoint_pages` keeps an answer: one look a second, not one per transaction.
_LOOK_EVERY = 1.0
_looked: tuple[float, int] = (float("-inf"), 0)  # (until, pages)


def _autocheckpoint_pages(database: str) -> int:
    """The automatic checkpoint for this process's next write transaction (call under `_lock`):
    none while it checkpoints itself, BESIDE_CHECKPOINTER_PAGES while another process of the host
    does, else the settings' backstop."""
    global _looked
    if not _commits_checkpoint:
        return 0
    now = time.monotonic()
    if now >= _looked[0]:
        pages = BESIDE_CHECKPOINTER_PAGES if _announced(database) else _settings_pages
        _looked = (now + _LOOK_EVERY, pages)
    return _looked[1]


def _announced(database: str) -> bool:
    """Whether a process of the host announces that it checkpoints (call under `_lock`). No lock
    file to look at (a full disk, a directory in its place) says no: nobody can announce then."""
    try:
        fd = _beside_fd(database, _CHECKPOINTER)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def another_process_checkpoints() -> bool:
    """Whether a daemon of the host announces its checkpoints (`checkpoints_elsewhere`), which copy
    every process's pages of the log. False where nothing is announced (PostgreSQL, in memory)."""
    database = _database(current())
    if database is None:
        return False
    with _lock:
        return _announced(database)


# Called after each write transaction of this process commits (`count_commits`).
_counting: Callable[[], None] | None = None


def count_commits(callback: Callable[[], None] | None) -> None:
    """`callback()` after each write transaction of this process commits, in the writing thread
    with the gate still held: it must be quick (a checkpoint thread's count)."""
    global _counting
    _counting = callback


# Stands in `connection.atomic_blocks` for `_lent_transaction`'s block, as its Atomic would (never entered).
_OUTERMOST = transaction.Atomic(DEFAULT_DB_ALIAS, savepoint=False, durable=False)
_BEGIN: dict[str | None, str] = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")}


@contextmanager
def _lent_transaction(conn: BaseDatabaseWrapper, database: str) -> Iterator[None]:
    """A transaction on this process's one SQLite connection for writes, lent to the thread's
    Django connection for its length (call under `_lock`, which makes the loan exclusive).

    Why one connection: a SQLite connection drops its whole page cache when it begins a
    transaction after another connection wrote. With a connection per thread, each thread's
    transaction found the other's commit, re-read every page it touched (58 reads per job) and
    paid for the purge: ~60 µs of the daemon's CPU per job, and 3 % of its throughput
    (docs/performance.md, item 25). The thread's own connection is kept for its reads outside the
    gate. A transaction that failed on the lent connection closes it; the next gets a new one.

    The transaction is what `transaction.atomic()` makes of an outermost block, without its
    generality: BEGIN, then COMMIT (ROLLBACK on an error, or when a nested block marked the
    transaction for rollback), then the commit hooks. Django's connection state is set as Atomic
    sets it, so nested `atomic()` blocks take savepoints and `on_commit` queues its callbacks as
    they would. Why: Atomic's enter and exit go through Django's cursor and its autocommit
    bookkeeping, ~20 µs of CPU per write transaction, one per job (docs/performance.md, item 29).
    Not inside a test case's transaction (`writing` then uses `atomic()`): the test's writes must
    stay on the connection that holds it."""
    global _writer_raw, _writer_pages, _settings_pages
    conn.ensure_connection()
    if _writer_raw is None or _writer_raw[0] != os.getpid():
        fresh = conn.get_new_connection(conn.get_connection_params())
        fresh.isolation_level = None  # autocommit between transactions, as Django keeps its own
        _settings_pages = _writer_pages = fresh.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        _writer_raw = (os.getpid(), fresh)
    raw = _writer_raw[1]
    pages = _autocheckpoint_pages(database)
    if pages != _writer_pages:
        raw.execute(f"PRAGMA wal_autocheckpoint={pages}")
        _writer_pages = pages
    own, conn.connection = conn.connection, raw
    committed = False
    try:
        with conn.wrap_database_errors:
            raw.execute(_BEGIN.get(getattr(conn, "transaction_mode", None), "BEGIN"))
        conn.autocommit = False
        conn.in_atomic_block = True
        conn.commit_on_exit = True
        conn.needs_rollback = False
        conn.atomic_blocks.append(_OUTERMOST)
        try:
            yield
        finally:
            conn.atomic_blocks.pop()
            conn.in_atomic_block = False
            conn.autocommit = True
        if not conn.needs_rollback:
            with conn.wrap_database_errors:
                raw.commit()
            committed = True
    except DatabaseError:
        _writer_raw = None  # a failed transaction's connection is not lent again
        raise
    finally:
        conn.connection = own
        if not committed:
            conn.needs_rollback = False
            conn.run_on_commit = []
            # Rolled back before anything else, a closed connection included: a statement of the
            # failed transaction that is still referenced (by its cursor, in the error's traceback,
            # which may live until a garbage collection) keeps close() from closing, and with it
            # the transaction and its write lock (every later writer waited out its busy timeout).
            try:
                raw.rollback()
            except Exception:  # the error that ended the transaction is the one to report
                _writer_raw = None
            if _writer_raw is None:  # dropped above: after a database error, or a failed rollback
                _close_quietly(raw)
    if committed:
        conn.errors_occurred = False
        conn.run_and_clear_commit_hooks()
        if _counting is not None:
            _counting()


def _close_quietly(raw: Any) -> None:
    try:
        raw.close()
    except Exception:  # closing a broken connection may fail as well
        pass


def _outside_any_transaction(conn: BaseDatabaseWrapper) -> bool:
    """No transaction is open, or only the ones a test case wraps every test in (Django's
    TestCase marks them): those never reach another process's writers."""
    return not conn.in_atomic_block or all(getattr(block, "_from_testcase", False) for block in conn.atomic_blocks)


@contextmanager
def writing(*, savepoint: bool = True) -> Iterator[None]:
    """One write transaction of the ledger, behind the gate (module docstring). Inside another,
    a savepoint lets the caller catch this block's error and go on; `savepoint=False` for a write
    whose error ends the whole transaction anyway (the per-job path: a savepoint is two more
    statements through Django's cursor, measured at ~90 µs of CPU per job)."""
    if getattr(_held, "depth", 0):
        _held.depth += 1
        try:
            if savepoint:
                with transaction.atomic():
                    yield
            else:
                # What `atomic(savepoint=False)` inside another block comes to, without its
                # bookkeeping (two of them per job): on an error, the whole transaction must roll back.
                try:
                    yield
                except BaseException:
                    current().needs_rollback = True
                    raise
        finally:
            _held.depth -= 1
        return
    conn = current()
    if not _outside_any_transaction(conn):
        raise UngatedTransaction(
            "a ledger write inside a transaction opened without ledger.writes.writing(): open it with "
            "writing() so the SQLite write gate is taken before the transaction takes the write lock"
        )
    database = _database(conn)
    _held.depth = 1
    try:
        if database is None:
            with transaction.atomic():
                yield
            return
        after: list[Callable[[], None]] = []
        _held.after = after
        with _gate(database):
            if conn.in_atomic_block:  # a test case's transaction (above): a savepoint in it
                with transaction.atomic():
                    yield
            else:
                with _lent_transaction(conn, database):
                    yield
        for callback in after:  # filled by the commit's hooks only: empty after a rollback
            callback()
    finally:
        _held.depth = 0
        _held.after = None


@contextmanager
def _gate(database: str) -> Iterator[None]:
    """The gate itself: this process's lock, then the host's `flock` (module docstring)."""
    with _lock:
        fd = _gate_fd(database)
        if fd is None:
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


_gate_refusal_logged = False


def _gate_fd(database: str) -> int | None:
    """The gate file's descriptor, or None where it cannot be opened (a directory in its place, a
    full disk that cannot create it; call under `_lock`). The write then goes on behind SQLite's
    own lock: the gate is a queue for fairness, not a guard, and the busy handler is slower under
    contention but as safe. Logged once per process; each write tries the file again."""
    global _gate_refusal_logged
    try:
        return _beside_fd(database, _GATE)
    except OSError as exc:
        if not _gate_refusal_logged:
            _gate_refusal_logged = True
            log.warning(
                "the ledger's write gate %s%s cannot be opened (%s): writes go on behind SQLite's own lock, "
                "slower when several processes write at once",
                database,
                _GATE,
                exc.strerror or exc,
            )
        return None


@contextmanager
def holding_gate() -> Iterator[None]:
    """The write gate without a transaction, for work that no writer of the host may overlap (the
    end of a checkpoint: gateway.storage.checkpoints). A no-op where `writing()` takes no gate."""
    if getattr(_held, "depth", 0):
        raise RuntimeError("holding_gate() inside writing(): this thread holds the gate already")
    database = _database(current())
    if database is None:
        yield
        return
    with _gate(database):
        yield


class Announcement:
    """A process's word to the host's other processes that it checkpoints the WAL: a shared
    `flock` on `<database>.checkpointer` while it holds it (`_autocheckpoint_pages` looks at it).
    Without a file (PostgreSQL, an in-memory database, one that cannot be opened) it says nothing."""

    def __init__(self, fd: int | None):
        self._fd = fd
        self.held = False

    def hold(self, on: bool) -> None:
        """Announce (shared: two daemons of a host may both checkpoint), or stop announcing."""
        if self._fd is not None and on != self.held:
            fcntl.flock(self._fd, fcntl.LOCK_SH if on else fcntl.LOCK_UN)
            self.held = on


@contextmanager
def checkpoints_elsewhere(*, announce: bool = True) -> Iterator[Announcement]:
    """While a thread of this process checkpoints the WAL itself, off the commit path (runworkers'
    main loop, an API worker's checkpoint thread: gateway.storage.checkpoints), this process's
    COMMITs never checkpoint, and, while the returned announcement holds (a daemon's: at first, and
    while it claims jobs), the other processes' of the host leave it to this one
    (`_autocheckpoint_pages`). Without `announce` the announcement never holds. SQLite's automatic
    checkpoint runs inside the COMMIT that finds the WAL long, so it copied pages and fsynced
    twice with the write gate held: 13-20 ms holds at 700 jobs/s, every other writer of the host
    waiting (docs/performance.md, item 42). Afterwards the write connection is closed, so the next
    opens with the settings' automatic checkpoint again."""
    global _commits_checkpoint, _writer_raw, _writer_pages
    database = _database(current())
    fd = None
    if database is not None and announce:
        try:
            fd = _open_beside(database, _CHECKPOINTER)  # its own: closing it lets go of the lock
        except OSError:
            pass  # unannounced (a full disk): other processes' COMMITs may then checkpoint as well
    announcement = Announcement(fd)
    announcement.hold(True)
    with _lock:
        _commits_checkpoint = False
        _writer_pages = None  # set at the next transaction
    try:
        yield announcement
    finally:
        with _lock:
            _commits_checkpoint = True
            if _writer_raw is not None and _writer_raw[0] == os.getpid():
                _close_quietly(_writer_raw[1])
            _writer_raw = None
        if fd is not None:
            os.close(fd)


# -- group commit ---------------------------------------------------------------------------------

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
    (docs/hot-path-profile.md, "API while workers drain"); one writer holds the gate once for all
    of them.

    One call's error is that call's alone, without a savepoint around each call: a savepoint and
    its release cost ~0.12 ms of the writer's ~0.6 ms per call at 500 requests/s, a fifth, while
    calls fail rarely (docs/performance.md, item 49). A transaction one of its calls (or its
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
            elif lost and ran:
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
    of their time queued behind such a holder (docs/hot-path-profile.md, "API while workers
    drain"); at 0.5 ms the API's p99 with workers draining went from 229 to 74 ms. `runworkers`
    (2 threads): 675.7 -> 699.7 jobs/s, 6 interleaved runs of 2,000 jobs each (docs/performance.md,
    item 40)."""
    sys.setswitchinterval(GIL_SWITCH_SECONDS)


def share_transactions() -> None:
    """From now on `shared()` calls of this process's threads are committed together by one writer
    thread. For processes with many writing threads (the API's gunicorn workers)."""
    global _writer
    with _lock:
        if _writer is None or _writer._pid != os.getpid():
            _writer = _Writer()


def stop_sharing() -> None:
    """Back to a transaction per call; the writer thread ends (its connection closed)."""
    global _writer
    with _lock:
        writer, _writer = _writer, None
    if writer is not None and writer._pid == os.getpid():
        writer.stop()


def shared(fn: Callable[[], T]) -> T:
    """`fn()` in a write transaction: its own (`writing()`), or, after `share_transactions()`, one
    it shares with the other threads' calls of the moment. Returns after the commit either way."""
    writer = _writer
    # Inside a transaction already (a caller's writing(), or one it must not wait outside of): join
    # it, as writing() does; the writer thread could never see it.
    if writer is None or writer._pid != os.getpid() or connection.in_atomic_block:
        with writing():
            return fn()
    return writer.call(fn)
