"""SQLite WAL checkpoints off the commit path.

In WAL mode SQLite copies the log back into the database file (a checkpoint, with an fsync) inside
the COMMIT that finds the log past `wal_autocheckpoint` pages: one commit in a few hundred took
7-9 ms instead of 0.5, with the ledger's write gate held, so every writer of the host waited with
it. That was the whole tail of a pipeline's per-hop overhead (docs/performance-history.md, "Pipeline").

So `runworkers`, the process that writes most, checkpoints on its main thread once the log has
grown to about CHECKPOINT_PAGES (`Checkpointer`; its worker threads wake the main loop when one is
due), and its own COMMITs never do (`ledger.writes.autocheckpoint.checkpoints_elsewhere`). A PASSIVE checkpoint
waits for no reader or writer, and writers go on appending meanwhile; what they appended is copied
by a second pass with the write gate held, which is short (the first pass copied the rest and
synced the log), so that the whole log is in the file and the next writer starts the log over.
Without that second pass a busy daemon's log only ever grew: a pass never caught up with writers
that never stopped, and the log started over only after a checkpoint inside a COMMIT
(docs/performance-history.md, item 42). While a daemon checkpoints, the other processes' COMMITs keep an
automatic checkpoint far past its length (`ledger.writes.autocheckpoint.BESIDE_CHECKPOINTER_PAGES`), a backstop;
without one, the settings' (`ductile_site.settings.WAL_AUTOCHECKPOINT_PAGES`, four times SQLite's
default), for the writes no daemon follows: a CLI's. The API's gunicorn workers, whose many
threads' writes one writer thread commits, checkpoint as the daemon does on a thread of their own
(`CheckpointThread`), and leave it to a daemon that announces its own.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, connection

from ledger.writes.autocheckpoint import another_process_checkpoints, checkpoints_elsewhere, count_commits
from ledger.writes.gate import holding_gate

log = logging.getLogger("ductile.checkpoints")

# The log's length, in pages, at which the daemon copies it back into the file (~32 MB). Why this
# long: a checkpoint costs two fsyncs and a wake-up of the main loop whatever its length, and the
# jobs of one interval share most of the pages it copies (their tables' last pages, their indexes'
# leaves). Every 50 jobs (~1,150 pages) the checkpoints took ~6 % of a drain's throughput, every
# ~350 (this length) ~2.5 %; longer, the WAL file grows past what other COMMITs must never reach
# (docs/performance-history.md, item 44).
CHECKPOINT_PAGES = 8000
# Jobs are counted, not pages (a page count would cost a look at the log per job): the first
# checkpoint after FIRST_AFTER_JOBS claims, the next ones after as many as the last interval's
# pages per job say fill CHECKPOINT_PAGES, within JOBS_BETWEEN. A job writes ~23 pages of log
# (its row and transitions, job_log, job_stopwatch, event_log, their indexes), a pipeline's step more.
FIRST_AFTER_JOBS = 100
JOBS_BETWEEN = (50, 1000)


class Checkpointer:
    """Run by the daemon's main loop with the number of jobs it has claimed: a checkpoint once
    the jobs claimed since the last one have filled about CHECKPOINT_PAGES of log, one as it goes
    idle if they filled a quarter of that, and none while it is idle."""

    def __init__(self) -> None:
        self._seen = 0
        self.every = FIRST_AFTER_JOBS
        self._sqlite = connection.vendor == "sqlite"

    def due(self, claimed: int, *, going_idle: bool = False) -> bool:
        """Whether `after` would checkpoint (never but on SQLite). Going idle, after a quarter of
        the interval: the other processes' COMMITs then checkpoint again past the settings'
        backstop (half of CHECKPOINT_PAGES), and would each copy what the daemon left."""
        threshold = max(self.every // 4, 1) if going_idle else self.every
        return self._sqlite and claimed - self._seen >= threshold

    def after(self, claimed: int, *, going_idle: bool = False) -> bool:
        """A checkpoint on this thread's connection if one is due; whether it ran. Raises
        DatabaseError, and then tries again at the next call."""
        if not self.due(claimed, going_idle=going_idle):
            return False
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            # The log's length in pages (-1 out of WAL mode): what the jobs since the last
            # checkpoint wrote, and the other processes' writes meanwhile.
            logged = cursor.fetchone()[1]
            # Even after a first pass that copied everything: a writer whose transaction began
            # before it ended appends to the log instead of starting it over.
            with holding_gate():
                cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
        if logged > 0 and not going_idle:  # a short interval says less of the pages per job
            self.every = jobs_between(claimed - self._seen, logged)
        self._seen = claimed
        return True

    def left_to_another(self, claimed: int) -> None:
        """Another process copied the log meanwhile: the interval starts again from `claimed`."""
        self._seen = claimed


def jobs_between(jobs: int, logged: int) -> int:
    """The claims until the next checkpoint, when `jobs` claims filled `logged` pages of log."""
    lowest, highest = JOBS_BETWEEN
    return min(max(round(CHECKPOINT_PAGES * jobs / logged), lowest), highest)


# Seconds without a claim after which the daemon counts as idle for its checkpoints, and stops
# announcing itself as the host's checkpointer (WorkerDaemon._checkpoint).
IDLE_AFTER = 1.0


class Activity:
    """Whether the daemon claims jobs, seen from its main loop's passes. Not one pass without a
    claim: a pass woken early (a checkpoint due, a thread's end) may see none while jobs flow, and
    each let-go of the announcement had the API's COMMITs checkpoint meanwhile (its p99 beside
    the workers went from 17 to 36 ms; docs/performance-history.md, item 44)."""

    def __init__(self, claimed: int, now: float):
        self._claimed, self._at = claimed, now

    def busy(self, claimed: int, now: float) -> bool:
        if claimed != self._claimed:
            self._claimed, self._at = claimed, now
        return now - self._at < IDLE_AFTER


# Seconds a checkpoint thread waits after a failed checkpoint before it may try again.
RETRY_AFTER = 1.0


class CheckpointThread:
    """The checkpoints of a process of many writing threads (the API's and the webhook listener's
    gunicorn workers), on a thread of its own, counted in the process's write transactions and
    sized in pages as the daemon's (`Checkpointer`). Why: their COMMITs checkpointed whenever the
    log passed the settings' backstop, with the write gate held and every request waiting for
    that commit (one writer thread commits them together, `ledger.writes.group_commit.shared`): at 500
    requests/s every ~0.7 s, for 10-30 ms, nearly all of the API's slowest 1 %
    (docs/performance-history.md, item 48). None while a daemon of the host announces its own: they copy
    this process's pages too."""

    def __init__(self) -> None:
        self._commits = 0
        self._due = threading.Event()
        self._checkpointer = Checkpointer()
        threading.Thread(target=self._run, name="ductile-checkpoints", daemon=True).start()

    @classmethod
    def start(cls) -> None:
        """A checkpoint thread for this process, counting its commits (none but on SQLite)."""
        if connection.vendor == "sqlite":
            count_commits(cls().committed)

    def committed(self) -> None:
        """After each write transaction of the process (`ledger.writes.autocheckpoint.count_commits`)."""
        self._commits += 1
        if self._checkpointer.due(self._commits):
            self._due.set()

    def _run(self) -> None:
        with checkpoints_elsewhere(announce=False):
            while True:
                self._due.wait()
                self._due.clear()
                commits = self._commits
                try:
                    if another_process_checkpoints():
                        self._checkpointer.left_to_another(commits)
                    else:
                        self._checkpointer.after(commits)
                except DatabaseError as exc:
                    log.warning("checkpoint of the ledger's log failed: %s", exc)
                    # Tried again at a commit after this pause: not at every commit (hundreds a
                    # second) while the cause lasts (a full disk), each with its warning.
                    time.sleep(RETRY_AFTER)
