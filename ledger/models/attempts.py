"""`job_attempts`: one append-only row per attempt of a job and how it ended (000 "Database
Reference": a fact row, beside `job_transitions` and `job_log`). Written in the transaction that
records the attempt's outcome (a plugin's answer, or lease recovery of a lost worker's job), so
an attempt is never counted without its end nor its end without the attempt."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.utils import timezone

from ledger import sql
from ledger.models.retention import PrunableQuerySet


class JobAttemptQuerySet(PrunableQuerySet["JobAttempt"]):
    def expired(self, before: datetime) -> JobAttemptQuerySet:
        """Attempts that ended before `before` (now minus `job_log_retention`, as their job_log
        rows): a scan in id order, no index on the time (ledger.models.retention)."""
        return self.filter(completed_at__lt=before)


class JobAttempt(models.Model):
    job_id = models.CharField(max_length=36)
    attempt = models.IntegerField()
    # succeeded | failed | timed_out: the attempt's own end (a last failed attempt's job is `dead`).
    status = models.CharField(max_length=16)
    worker = models.CharField(max_length=200, null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(default=timezone.now)
    error = models.TextField(null=True, blank=True)
    # The sandbox profile the plugin ran under (gateway.config.sandbox.Sandbox.describe); None for
    # an attempt that spawned nothing (a refusal, a recovery, an internal hop).
    sandbox = models.TextField(null=True, blank=True)

    objects = JobAttemptQuerySet.as_manager()

    class Meta:
        db_table = "job_attempts"
        ordering = ["id"]
        constraints = [
            # The original's identity of an attempt; also the index `job inspect` reads by.
            models.UniqueConstraint(fields=["job_id", "attempt"], name="job_attempts_job_attempt_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} #{self.attempt} {self.status}"

    @classmethod
    def record(
        cls,
        *,
        job_id: str,
        attempt: int,
        status: str,
        worker: str | None,
        started_at: datetime | None,
        error: str | None,
        now: datetime,
        sandbox: str | None = None,
    ) -> None:
        """Call inside the transaction that records the attempt's outcome."""
        sql.insert(
            cls,
            {
                "job_id": job_id,
                "attempt": attempt,
                "status": status,
                "worker": worker,
                "started_at": started_at,
                "completed_at": now,
                "error": error,
                "sandbox": sandbox,
            },
        )
