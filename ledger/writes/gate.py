"""The write gate: one SQLite writer at a time, queued in the kernel.

SQLite lets one transaction write at a time. A second `BEGIN IMMEDIATE` waits in SQLite's busy
handler, which retries after sleeps that grow to 100 ms: under load a waiter keeps losing the lock
to newcomers that arrive while it sleeps, and a few requests wait for seconds while the rest take
a millisecond (docs/performance-history.md, "API"). Behind this gate, writers wait on a lock that hands
over at release: a thread lock inside the process (`process_lock`), then an exclusive `flock` on a
file beside the database across the host's processes. PostgreSQL, and an in-memory SQLite
database (which no other process can open), take no gate (`database_file` is None for them).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db.backends.base.base import BaseDatabaseWrapper

from ledger.sql import current

log = logging.getLogger("ductile.ledger")

# The in-process half of the gate; also guards this package's per-process state.
process_lock = threading.Lock()
_files: dict[str, tuple[int, int]] = {}  # suffix -> (pid, fd): a forked child opens its own
# What this thread holds: `depth` of nested `writing()` blocks, `after` their after-release work.
held = threading.local()

_GATE = ".write-gate"


def database_file(conn: BaseDatabaseWrapper) -> str | None:
    """The SQLite file, or None on another backend or an in-memory database (one process only)."""
    if conn.vendor != "sqlite":
        return None
    name = str(conn.settings_dict["NAME"])
    return None if name == ":memory:" or "mode=memory" in name else name  # as Django tells them apart


def open_beside(database: str, suffix: str) -> int:
    return os.open(Path(database).with_name(Path(database).name + suffix), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def beside_fd(database: str, suffix: str) -> int:
    """This process's descriptor of a file beside the database: the gate's, the checkpointer's
    (call under `process_lock`)."""
    kept = _files.get(suffix)
    if kept is None or kept[0] != os.getpid():
        kept = _files[suffix] = (os.getpid(), open_beside(database, suffix))
    return kept[1]


@contextmanager
def gate(database: str) -> Iterator[None]:
    """The gate itself: this process's lock, then the host's `flock`."""
    with process_lock:
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
    full disk that cannot create it; call under `process_lock`). The write then goes on behind
    SQLite's own lock: the gate is a queue for fairness, not a guard, and the busy handler is
    slower under contention but as safe. Logged once per process; each write tries the file again."""
    global _gate_refusal_logged
    try:
        return beside_fd(database, _GATE)
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
    if getattr(held, "depth", 0):
        raise RuntimeError("holding_gate() inside writing(): this thread holds the gate already")
    database = database_file(current())
    if database is None:
        yield
        return
    with gate(database):
        yield
