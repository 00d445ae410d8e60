"""The live `event_log` read in id order, for the event stream (`GET /events`), the live views and
`system watch`.

Ordering. `event_log.id` is allocated in insert order on both backends (SQLite AUTOINCREMENT,
PostgreSQL identity), so it is the cursor; `created_at` is not, being the writer's clock read
before its transaction. But ids become visible in *commit* order. On SQLite the two agree: one
writer holds the lock from its first insert to its commit. On PostgreSQL a transaction that took
id 10 may commit after one that took id 11, and a reader that moved past 11 would never see 10.
So the cursor also watches the gaps it skipped, for GAP_GRACE_SECONDS, and sends a row that fills
one when it appears (out of id order, with its own id). A gap that stays empty was a rolled-back
insert or a pruned row.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Max, Q

from gateway.reports import ts
from gateway.runtime import RUNTIME
from ledger.models import EventRecord

GAP_GRACE_SECONDS = 10.0
MAX_GAPS = 256  # beyond this the oldest gaps are given up: a bound on each poll's query
BATCH = 500


@dataclass
class Gap:
    low: int
    high: int
    expires: float


@dataclass
class EventCursor:
    """The rows a stream still owes: every id above `last`, and the recent gaps below it."""

    last: int
    gaps: list[Gap] = field(default_factory=list)

    def pending(self, now: float) -> Q:
        self.gaps = [gap for gap in self.gaps if gap.expires > now]
        condition = Q(id__gt=self.last)
        for gap in self.gaps:
            condition |= Q(id__gte=gap.low, id__lte=gap.high)
        return condition

    def advance(self, ids: Sequence[int], now: float) -> None:
        """Record rows as sent (`ids` ascending): ids past `last` open gaps for what they skip;
        ids inside a gap fill it."""
        for row_id in ids:
            if row_id > self.last:
                if row_id > self.last + 1:
                    self.gaps.append(Gap(self.last + 1, row_id - 1, now + GAP_GRACE_SECONDS))
                self.last = row_id
                continue
            for index, gap in enumerate(self.gaps):
                if gap.low <= row_id <= gap.high:
                    parts = [Gap(gap.low, row_id - 1, gap.expires), Gap(row_id + 1, gap.high, gap.expires)]
                    self.gaps[index : index + 1] = [part for part in parts if part.low <= part.high]
                    break
        del self.gaps[:-MAX_GAPS]


def latest_id() -> int:
    return EventRecord.objects.aggregate(last=Max("id"))["last"] or 0


def row_data(row: EventRecord) -> dict[str, Any]:
    """An `event_log` row as the streams send it: its type, source and payload are a plugin's
    words, scrubbed of the config's secrets."""
    return RUNTIME.scrubber().json(
        {
            "id": row.id,
            "type": row.type,
            "event_id": row.event_id,
            "source": row.source,
            "job_id": row.job_id,
            "payload": row.payload,
            "created_at": ts(row.created_at),
        }
    )


def next_rows(cursor: EventCursor, memo: dict[Any, Any] | None = None) -> list[EventRecord]:
    """The next rows `cursor` owes (at most BATCH), marked as sent. Cursors in the same state
    share one query through `memo` (every stream of a process caught up with the ledger is at
    the same cursor: one query for all of them)."""
    condition = cursor.pending(time.monotonic())
    key = ("rows", cursor.last, tuple((gap.low, gap.high) for gap in cursor.gaps))
    rows: list[EventRecord] | None = None if memo is None else memo.get(key)
    if rows is None:
        rows = list(EventRecord.objects.filter(condition).order_by("id")[:BATCH])
        if memo is not None:
            memo[key] = rows
    cursor.advance([row.id for row in rows], time.monotonic())
    return rows
