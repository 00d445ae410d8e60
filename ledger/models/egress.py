"""`egress_hosts`: every host a job's plugin asked the egress proxy for under `network: egress`,
allowed or refused, with how many requests (issue 39, docs/sandbox.md). Written in the transaction
that records the attempt's outcome; read by `job inspect`, the console's job page, and summed per
plugin (`plugin egress`, the console's plugin page)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Count, Max, Sum
from django.utils import timezone

from ledger import sql
from ledger.models.retention import PrunableQuerySet
from ledger.timestamps import rfc3339


class EgressHostQuerySet(PrunableQuerySet["EgressHost"]):
    def expired(self, before: datetime) -> EgressHostQuerySet:
        """Rows of attempts that ended before `before` (kept as long as job_log's)."""
        return self.filter(created_at__lt=before)

    def of_job(self, job_id: str) -> list[dict[str, Any]]:
        rows = self.filter(job_id=job_id).order_by("attempt", "id")
        return [{"attempt": r.attempt, "host": r.host, "verdict": r.verdict, "requests": r.requests} for r in rows]

    def by_plugin(self, plugin: str) -> list[dict[str, Any]]:
        """Each host the plugin's jobs asked for, with its verdict, summed over the ledger's jobs."""
        rows = (
            self.filter(plugin=plugin)
            .values("host", "verdict")
            .annotate(requests=Sum("requests"), jobs=Count("job_id", distinct=True), last_at=Max("created_at"))
            .order_by("host", "verdict")
        )
        return [{**row, "last_at": rfc3339(row["last_at"]) if row["last_at"] else None} for row in rows]


class EgressHost(models.Model):
    job_id = models.CharField(max_length=36)
    attempt = models.IntegerField()
    plugin = models.CharField(max_length=200)
    host = models.CharField(max_length=300)  # host:port as the plugin asked for it
    verdict = models.CharField(max_length=8)  # allowed | refused
    requests = models.IntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    objects = EgressHostQuerySet.as_manager()

    class Meta:
        db_table = "egress_hosts"
        ordering = ["id"]
        indexes = [
            models.Index(fields=["job_id"], name="egress_hosts_job_idx"),  # job inspect, the job page
            models.Index(fields=["plugin", "host"], name="egress_hosts_plugin_idx"),  # summed per plugin
        ]

    def __str__(self) -> str:
        return f"{self.job_id} #{self.attempt} {self.host} {self.verdict}"

    @classmethod
    def record(
        cls, *, job_id: str, attempt: int, plugin: str, hosts: list[tuple[str, str, int]], now: datetime
    ) -> None:
        """Call inside the transaction that records the attempt's outcome."""
        for host, verdict, requests in hosts:
            sql.insert(
                cls,
                {
                    "job_id": job_id,
                    "attempt": attempt,
                    "plugin": plugin,
                    "host": host[:300],
                    "verdict": verdict,
                    "requests": requests,
                    "created_at": now,
                },
            )
