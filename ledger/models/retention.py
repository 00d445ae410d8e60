"""Retention: expired rows leave in short batches, never in one long delete.

SQLite has a single writer: one DELETE over a month of job_log would hold the write lock for
seconds and stall every worker's claim and every enqueue behind it. A batch holds it for the few
milliseconds it takes to delete a few hundred rows; the caller (gateway/operations/housekeeping.py) loops.

The append-only tables (job_transitions, job_stopwatch, event_log) have no index on `created_at`:
every job would write one more index page to each for the sake of a pass that runs a few times a
day. Their expired rows are found by a scan in id order, which is insertion order: the old rows
come first, and only the last, short batch of a pass reads the table to its end.
"""

from __future__ import annotations

from typing import TypeVar

from django.db import models

from ledger.writes.transaction import writing

_M = TypeVar("_M", bound=models.Model)


class PrunableQuerySet(models.QuerySet[_M]):
    def prune_batch(self, limit: int) -> int:
        """Delete at most `limit` rows of this queryset in one transaction; returns how many.

        The ids are read first, outside the write transaction: where no index serves the
        conditions (the append-only tables' `created_at`, `expired` there) the read is a scan in id
        order, and inside the transaction it would hold the write lock meanwhile. The DELETE
        repeats the queryset's own conditions, so a row that stopped matching after its id was
        read (a job taken back into the queue) is kept."""
        # Unordered: the LIMIT then stops at the first `limit` matches of the scan instead of
        # sorting every expired row first. Expired rows are the oldest, so a scan in id order finds
        # them at its start.
        ids = list(self.order_by().values_list("pk", flat=True)[:limit])
        if not ids:
            return 0
        with writing():
            deleted, _ = self.filter(pk__in=ids).delete()
        return deleted
