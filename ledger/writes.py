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
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection, transaction

_lock = threading.Lock()
_file: tuple[int, int] | None = None  # (pid, fd): a forked child opens its own
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


def _database() -> str | None:
    """The SQLite file, or None on another backend or an in-memory database (one process only)."""
    if connection.vendor != "sqlite":
        return None
    name = str(connection.settings_dict["NAME"])
    return None if name == ":memory:" or "mode=memory" in name else name  # as Django tells them apart


def _gate_fd(database: str) -> int:
    """This process's descriptor of the gate file (call under `_lock`)."""
    global _file
    if _file is None or _file[0] != os.getpid():
        path = Path(database).with_name(Path(database).name + ".write-gate")
        _file = (os.getpid(), os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    return _file[1]


def _outside_any_transaction() -> bool:
    """No transaction is open, or only the ones a test case wraps every test in (Django's
    TestCase marks them): those never reach another process's writers."""
    return not connection.in_atomic_block or all(
        getattr(block, "_from_testcase", False) for block in connection.atomic_blocks
    )


@contextmanager
def writing() -> Iterator[None]:
    """One write transaction of the ledger, behind the gate (module docstring)."""
    if getattr(_held, "depth", 0):
        _held.depth += 1
        try:
            with transaction.atomic():
                yield
        finally:
            _held.depth -= 1
        return
    if not _outside_any_transaction():
        raise UngatedTransaction(
            "a ledger write inside a transaction opened without ledger.writes.writing(): open it with "
            "writing() so the SQLite write gate is taken before the transaction takes the write lock"
        )
    database = _database()
    _held.depth = 1
    try:
        if database is None:
            with transaction.atomic():
                yield
            return
        after: list[Callable[[], None]] = []
        _held.after = after
        with _lock:
            fd = _gate_fd(database)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                with transaction.atomic():
                    yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        for callback in after:  # filled by the commit's hooks only: empty after a rollback
            callback()
    finally:
        _held.depth = 0
        _held.after = None
