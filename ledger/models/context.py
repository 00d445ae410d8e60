"""`event_context`: the control-plane ledger of baggage across hops (spec 001 §3.1)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from ledger.models.jobs import new_id


class EventContext(models.Model):
    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    parent_id = models.CharField(max_length=36, null=True, blank=True)
    pipeline_name = models.CharField(max_length=200, null=True, blank=True)
    step_id = models.CharField(max_length=200, null=True, blank=True)
    accumulated_json = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "event_context"
        indexes = [models.Index(fields=["parent_id"], name="event_context_parent_idx")]  # read by job inspect

    def __str__(self) -> str:
        return f"{self.pipeline_name or '-'}:{self.step_id or '-'} {self.id}"
