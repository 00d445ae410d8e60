"""The process's one SQLite connection for writes, lent to a writing thread's Django connection
for its transaction (`ledger.writes.transaction`; call everything here under the gate's
`process_lock`, which makes the loan exclusive).

Why one connection: a SQLite connection drops its whole page cache when it begins a transaction
after another connection wrote. With a connection per thread, each thread's transaction found the
other's commit, re-read every page it touched (58 reads per job) and paid for the purge: ~60 µs of
the daemon's CPU per job, and 3 % of its throughput (docs/performance-history.md, item 25). The
thread's own connection is kept for its reads outside the gate.
"""

from __future__ import annotations

import os
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

_raw: tuple[int, Any] | None = None  # (pid, sqlite3 connection): a forked child opens its own
# Its `wal_autocheckpoint` as last set; None: to be set at its next transaction.
_pages: int | None = None
# Its value from the settings (their init_command): the backstop when no daemon checkpoints.
settings_pages = 1000


def take(conn: BaseDatabaseWrapper) -> Any:
    """The write connection, opened with `conn`'s parameters if this process has none (which
    reads the settings' automatic checkpoint, `settings_pages`)."""
    global _raw, _pages, settings_pages
    conn.ensure_connection()
    if _raw is None or _raw[0] != os.getpid():
        fresh = conn.get_new_connection(conn.get_connection_params())
        fresh.isolation_level = None  # autocommit between transactions, as Django keeps its own
        with conn.wrap_database_errors:
            settings_pages = _pages = fresh.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        _raw = (os.getpid(), fresh)
    return _raw[1]


def checkpoint_at(conn: BaseDatabaseWrapper, raw: Any, pages: int) -> None:
    """The write connection's automatic checkpoint, `pages` (`ledger.writes.autocheckpoint`)."""
    global _pages
    if pages != _pages:
        with conn.wrap_database_errors:
            raw.execute(f"PRAGMA wal_autocheckpoint={pages}")
        _pages = pages


def drop() -> None:
    """A failed transaction's connection is not lent again: the next one opens a new one."""
    global _raw
    _raw = None


def dropped() -> bool:
    return _raw is None


def reset(*, close: bool) -> None:
    """Set the automatic checkpoint again at the next transaction; with `close`, on a new
    connection (the settings' value)."""
    global _raw, _pages
    _pages = None
    if close:
        if _raw is not None and _raw[0] == os.getpid():
            close_quietly(_raw[1])
        _raw = None


def close_quietly(raw: Any) -> None:
    try:
        raw.close()
    except Exception:  # closing a broken connection may fail as well
        pass
