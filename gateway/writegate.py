"""One SQLite writer at a time among the processes that take this gate, waiting in the kernel
rather than in SQLite's busy handler.

SQLite lets one transaction write at a time. A second `BEGIN IMMEDIATE` waits in SQLite's busy
handler, which retries after sleeps that grow to 100 ms: under load a waiter keeps losing the lock
to newcomers that arrive while it sleeps, and a few requests wait for seconds while the rest take
a millisecond (docs/performance.md, "API"). Behind this gate, writers wait on a lock that hands
over at release: a thread lock inside the process, then an exclusive `flock` on a file beside the
database across the host's processes. It is taken by the hot writers: the API's enqueues and the
workers' claims and outcome records. Other writers (the scheduler, the webhook listener, CLI
commands) still meet the gate's holder in SQLite's busy handler, as before.

The gate is taken before the transaction begins and released after it (and its commit hooks)
ends. PostgreSQL has row locks and no such handler: there the gate is not taken at all (nor
on an in-memory SQLite database, which no other process can open).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

_lock = threading.Lock()
_file: tuple[int, int] | None = None  # (pid, fd): a forked child opens its own


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


@contextmanager
def sqlite_writer() -> Iterator[None]:
    """Hold the gate for one write transaction (open it inside the block)."""
    database = _database()
    if database is None:
        yield
        return
    with _lock:
        fd = _gate_fd(database)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
