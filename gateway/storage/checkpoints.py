"""SQLite WAL checkpoints off the commit path.

In WAL mode SQLite copies the log back into the database file (a checkpoint, with an fsync) inside
the COMMIT that finds the log past `wal_autocheckpoint` pages: one commit in a few hundred took
7-9 ms instead of 0.5, with the ledger's write gate held, so every writer of the host waited with
it. That was the whole tail of a pipeline's per-hop overhead (docs/performance.md, "Pipeline").

So `runworkers`, the process that writes most, checkpoints on its main thread after every few
dozen jobs (`Checkpointer`; its worker threads wake the main loop when one is due), and its own
COMMITs never do (`ledger.writes.checkpoints_elsewhere`). A PASSIVE checkpoint waits for no reader
or writer, and writers go on appending meanwhile; what they appended is copied by a second pass
with the write gate held, which is short (the first pass copied the rest and synced the log), so
that the whole log is in the file and the next writer starts the log over. Without that second
pass a busy daemon's log only ever grew: a pass never caught up with writers that never stopped,
and the log started over only after a checkpoint inside a COMMIT (docs/performance.md, item 42).
Every other connection keeps an automatic checkpoint as a backstop
(`ductile_site.settings.WAL_AUTOCHECKPOINT_PAGES`, four times SQLite's default), for the writes no
daemon follows: an API or a CLI on its own.
"""

from __future__ import annotations

from django.db import connection

from ledger.writes import holding_gate

# Jobs claimed between checkpoints: each job writes a few dozen pages (its row and transitions,
# job_log, job_stopwatch, event_log, their indexes), so this keeps the WAL near SQLite's default
# 1,000-page checkpoint. Fewer, larger checkpoints: each one's fsync costs the same, and the root
# hop of a pipeline that meets one waits ~0.5 ms longer.
CHECKPOINT_AFTER_JOBS = 50


class Checkpointer:
    """Run by the daemon's main loop with the number of jobs it has claimed: a checkpoint after
    every CHECKPOINT_AFTER_JOBS of them, and none while the daemon is idle."""

    def __init__(self) -> None:
        self._seen = 0
        self._sqlite = connection.vendor == "sqlite"

    def due(self, claimed: int) -> bool:
        """Whether `after` would checkpoint (never but on SQLite)."""
        return self._sqlite and claimed - self._seen >= CHECKPOINT_AFTER_JOBS

    def after(self, claimed: int) -> bool:
        """A checkpoint on this thread's connection if one is due; whether it ran. Raises
        DatabaseError, and then tries again at the next call."""
        if not self.due(claimed):
            return False
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            # Even after a first pass that copied everything: a writer whose transaction began
            # before it ended appends to the log instead of starting it over.
            with holding_gate():
                cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self._seen = claimed
        return True
