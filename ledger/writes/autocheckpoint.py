"""Which process's COMMITs checkpoint the WAL.

SQLite's automatic checkpoint runs inside the COMMIT that finds the WAL long, so it copied pages
and fsynced twice with the write gate held: 13-20 ms holds at 700 jobs/s, every other writer of the
host waiting (docs/performance-history.md, item 42). A daemon checkpoints off the commit path
instead (gateway.storage.checkpoints) and announces it with a shared `flock` on
`<database>.checkpointer`; while it does, the other processes' write connections checkpoint only
far past the length at which the daemon copies the log back (BESIDE_CHECKPOINTER_PAGES).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ledger.sql import current
from ledger.writes import write_connection
from ledger.writes.gate import beside_fd, database_file, open_beside, process_lock

# Held shared by every process that checkpoints the WAL itself (`checkpoints_elsewhere`).
_CHECKPOINTER = ".checkpointer"

# False while a thread of this process checkpoints the WAL itself (`checkpoints_elsewhere`).
_commits_checkpoint = True
# While a daemon of the host checkpoints, the automatic checkpoint of the other processes' write
# connections: well past the log's length at which the daemon copies it back
# (gateway.storage.checkpoints.CHECKPOINT_PAGES), so that no COMMIT of theirs does it in the
# daemon's place with the write gate held. Not for an API alone: nobody else checkpoints for it,
# and its in-commit checkpoints grew with the log (p99 at 500 requests/s 44 against 17 ms with
# 20,000 pages; docs/performance-history.md, item 44).
BESIDE_CHECKPOINTER_PAGES = 20_000
# How long `pages_for_next_commit` keeps an answer: one look a second, not one per transaction.
_LOOK_EVERY = 1.0
_looked: tuple[float, int] = (float("-inf"), 0)  # (until, pages)


def pages_for_next_commit(database: str) -> int:
    """The automatic checkpoint for this process's next write transaction (call under
    `process_lock`): none while it checkpoints itself, BESIDE_CHECKPOINTER_PAGES while another
    process of the host does, else the settings' backstop."""
    global _looked
    if not _commits_checkpoint:
        return 0
    now = time.monotonic()
    if now >= _looked[0]:
        pages = BESIDE_CHECKPOINTER_PAGES if _announced(database) else write_connection.settings_pages
        _looked = (now + _LOOK_EVERY, pages)
    return _looked[1]


def _announced(database: str) -> bool:
    """Whether a process of the host announces that it checkpoints (call under `process_lock`). No
    lock file to look at (a full disk, a directory in its place) says no: nobody can announce then."""
    try:
        fd = beside_fd(database, _CHECKPOINTER)
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
    database = database_file(current())
    if database is None:
        return False
    with process_lock:
        return _announced(database)


# Called after each write transaction of this process commits (`count_commits`).
counting: Callable[[], None] | None = None


def count_commits(callback: Callable[[], None] | None) -> None:
    """`callback()` after each write transaction of this process commits, in the writing thread
    with the gate still held: it must be quick (a checkpoint thread's count)."""
    global counting
    counting = callback


class Announcement:
    """A process's word to the host's other processes that it checkpoints the WAL: a shared
    `flock` on `<database>.checkpointer` while it holds it (`pages_for_next_commit` looks at it).
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
    (`pages_for_next_commit`). Without `announce` the announcement never holds. Afterwards the write
    connection is closed, so the next opens with the settings' automatic checkpoint again."""
    global _commits_checkpoint
    database = database_file(current())
    fd = None
    if database is not None and announce:
        try:
            fd = open_beside(database, _CHECKPOINTER)  # its own: closing it lets go of the lock
        except OSError:
            pass  # unannounced (a full disk): other processes' COMMITs may then checkpoint as well
    announcement = Announcement(fd)
    announcement.hold(True)
    with process_lock:
        _commits_checkpoint = False
        write_connection.reset(close=False)  # set at the next transaction
    try:
        yield announcement
    finally:
        with process_lock:
            _commits_checkpoint = True
            write_connection.reset(close=True)
        if fd is not None:
            os.close(fd)
