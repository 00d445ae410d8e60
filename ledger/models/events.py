"""`event_log`: every event the gateway saw, in order. Root events, events plugins emitted,
`job.preflight` decisions and lifecycle signals; its id is the SSE `Last-Event-ID`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from ledger import sql
from ledger.models.retention import PrunableQuerySet


class EventRecordQuerySet(PrunableQuerySet["EventRecord"]):
    def expired(self, before: datetime) -> EventRecordQuerySet:
        """Events recorded before `before` (now minus `job_log_retention`). The SSE cursor is the
        row id, so a client resuming past pruned rows simply gets the next surviving one. A scan in
        id order, no index (ledger.models.retention)."""
        return self.filter(created_at__lt=before)


class EventRecord(models.Model):
    event_id = models.CharField(max_length=36, null=True, blank=True)
    type = models.CharField(max_length=200)
    source = models.CharField(max_length=200, blank=True, default="")
    job_id = models.CharField(max_length=36, null=True, blank=True)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    objects = EventRecordQuerySet.as_manager()

    class Meta:
        db_table = "event_log"
        ordering = ["id"]
        indexes = [
            models.Index(fields=["job_id"], name="event_log_job_idx"),  # read by job inspect
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.type}"

    @classmethod
    def record(cls, events: Iterable[Mapping[str, Any]], *, job_id: str | None, now: datetime) -> None:
        """Append events (envelopes with type, payload and optionally source/event_id). Call inside
        the transaction that produced them."""
        for event in events:
            sql.insert(
                cls,
                {
                    "event_id": event.get("event_id"),
                    "type": event["type"],
                    "source": event.get("source") or "",
                    "job_id": job_id,
                    "payload": dict(event.get("payload") or {}),
                    "created_at": now,
                },
            )
