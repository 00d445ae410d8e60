"""Retention: expired rows leave in short batches, never in one long delete.

SQLite has a single writer: one DELETE over a month of job_log would hold the write lock for
seconds and stall every worker's claim and every enqueue behind it. A batch holds it for the few
milliseconds it takes to delete a few hundred rows; the caller (gateway/operations/housekeeping.py) loops.
"""

from __future__ import annotations

from typing import TypeVar

from django.db import models

from ledger.writes import writing

_M = TypeVar("_M", bound=models.Model)


class PrunableQuerySet(models.QuerySet[_M]):
    def prune_batch(self, limit: int) -> int:
        """Delete at most `limit` rows of this queryset in one transaction; returns how many.
        The DELETE repeats the queryset's own conditions, so a row that stopped matching after
        its id was read (a job taken back into the queue) is kept."""
        with writing():
            # Unordered: the LIMIT then stops at the first `limit` matches of the index scan
            # instead of sorting every expired row first.
            ids = list(self.order_by().values_list("pk", flat=True)[:limit])
            if not ids:
                return 0
            deleted, _ = self.filter(pk__in=ids).delete()
        return deleted
