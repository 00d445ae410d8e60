"""`event_context`: the control-plane ledger of baggage across hops (spec 001 §3.1)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from ledger import sql
from ledger.ids import new_id


class EventContext(models.Model):
    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    parent_id = models.CharField(max_length=36, null=True, blank=True)
    pipeline_name = models.CharField(max_length=200, null=True, blank=True)
    step_id = models.CharField(max_length=200, null=True, blank=True)
    accumulated_json = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "event_context"
        indexes = [
            models.Index(fields=["parent_id"], name="event_context_parent_idx"),  # read by job inspect
            # Read by the console's job list: its pipeline filter and that filter's choices.
            models.Index(fields=["pipeline_name"], name="event_context_pipeline_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.pipeline_name or '-'}:{self.step_id or '-'} {self.id}"

    @classmethod
    def hop(cls, context_id: str) -> tuple[str | None, str | None, dict[str, Any]] | None:
        """The pipeline, step and baggage of one context row (ledger.sql.CONTEXT_HOP)."""
        row = sql.fetch_row(sql.CONTEXT_HOP, [context_id])
        if row is None:
            return None
        return row[0], row[1], sql.json_value(row[2]) or {}

    @classmethod
    def record(
        cls,
        *,
        parent_id: str | None,
        pipeline: str | None,
        step: str | None,
        accumulated: Mapping[str, Any],
        now: datetime,
        context_id: str | None = None,
    ) -> str:
        """Append one hop's context row (rows are never rewritten) and return its id (`context_id`,
        or a new one)."""
        context_id = context_id or new_id()
        sql.insert(
            cls,
            {
                "id": context_id,
                "parent_id": parent_id,
                "pipeline_name": pipeline,
                "step_id": step,
                "accumulated_json": dict(accumulated),
                "created_at": now,
            },
        )
        return context_id
