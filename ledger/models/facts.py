"""`plugin_facts` (append-only durable record), `plugin_state` (its compatibility view) and the
`storage_sequences` allocator behind the facts' Ductile-owned monotonic `seq`.

Spec 000 §5.9 and "Plugin Facts".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import F, OuterRef, Subquery
from django.utils import timezone

from ledger import sql
from ledger.models.retention import PrunableQuerySet
from ledger.writes.transaction import writing

STATE_SIZE_LIMIT = 1024 * 1024  # spec §5.9: 1 MB per plugin_state row, and per emitted snapshot


class StorageSequence(models.Model):
    name = models.CharField(primary_key=True, max_length=64)
    value = models.BigIntegerField(default=0)

    class Meta:
        db_table = "storage_sequences"

    def __str__(self) -> str:
        return f"{self.name}={self.value}"

    @classmethod
    def next_value(cls, name: str) -> int:
        """Call inside a transaction: the UPDATE row-locks the counter until commit."""
        cls.objects.get_or_create(name=name)
        cls.objects.filter(name=name).update(value=F("value") + 1)
        return int(cls.objects.values_list("value", flat=True).get(name=name))


class PluginFactQuerySet(PrunableQuerySet["PluginFact"]):
    def expired(self, before: datetime) -> PluginFactQuerySet:
        """Facts recorded before `before`, except the newest of each plugin's fact type: the one
        `plugin_state` mirrors, and all a plugin that stopped polling has left. Legacy rows without
        a `seq` have no order to judge by and stay."""
        newest = (
            PluginFact.objects.filter(
                plugin_name=OuterRef("plugin_name"), fact_type=OuterRef("fact_type"), seq__isnull=False
            )
            .order_by("-seq")
            .values("seq")[:1]
        )
        return self.filter(created_at__lt=before, seq__lt=Subquery(newest))


class PluginFact(models.Model):
    seq = models.BigIntegerField(null=True)
    plugin_name = models.CharField(max_length=200)
    fact_type = models.CharField(max_length=200)
    job_id = models.CharField(max_length=36, null=True, blank=True)
    command = models.CharField(max_length=200, null=True, blank=True)
    fact_json = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    objects = PluginFactQuerySet.as_manager()

    class Meta:
        db_table = "plugin_facts"
        ordering = ["-seq"]
        # Read by the operator query in "Database Reference" and by the latest-fact view rebuild.
        indexes = [
            models.Index(fields=["plugin_name", "seq"], name="plugin_facts_plugin_seq_idx"),
            # Read by the console's job page: the facts a job wrote.
            models.Index(fields=["job_id"], name="plugin_facts_job_idx", condition=models.Q(job_id__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.plugin_name} #{self.seq} {self.fact_type}"


class PluginState(models.Model):
    plugin_name = models.CharField(primary_key=True, max_length=200)
    state = models.JSONField(default=dict)
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "plugin_state"

    def __str__(self) -> str:
        return self.plugin_name

    @classmethod
    def current(cls, plugin_name: str) -> dict[str, Any]:
        """The compatibility view sent as the request's `state`; read once per job, so by hand."""
        value = sql.json_value(sql.fetch_value(sql.PLUGIN_STATE, [plugin_name]))
        return value if isinstance(value, dict) else {}


def write_state(
    plugin_name: str, fact_type: str | None, snapshot: dict[str, Any], *, job_id: str, command: str, now: datetime
) -> None:
    """A declared fact appends a `plugin_facts` row and mirrors it into `plugin_state`
    (`compatibility_view: mirror_object`); without a rule, a shallow write-through. Call inside
    the completing transaction."""
    with writing():
        _write_state(plugin_name, fact_type, snapshot, job_id=job_id, command=command, now=now)


def _write_state(
    plugin_name: str, fact_type: str | None, snapshot: dict[str, Any], *, job_id: str, command: str, now: datetime
) -> None:
    if fact_type is not None:
        PluginFact.objects.create(
            seq=StorageSequence.next_value("plugin_facts"),
            plugin_name=plugin_name,
            fact_type=fact_type,
            job_id=job_id,
            command=command,
            fact_json=snapshot,
            created_at=now,
        )
        state = snapshot
    else:
        state = {**PluginState.current(plugin_name), **snapshot}
    PluginState.objects.update_or_create(plugin_name=plugin_name, defaults={"state": state, "updated_at": now})
