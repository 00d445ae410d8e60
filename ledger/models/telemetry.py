"""`job_stopwatch`: one immutable timing record per plugin invocation (spec "Stopwatch")."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.utils import timezone

from ledger.models.retention import PrunableQuerySet


class StopwatchStatus(models.TextChoices):
    OK = "ok"
    ERR = "err"
    TIMEOUT = "timeout"
    CAPTURE_ERROR = "capture_error"


class JobStopwatchQuerySet(PrunableQuerySet["JobStopwatch"]):
    def expired(self, before: datetime) -> JobStopwatchQuerySet:
        """Timings recorded before `before` (now minus `job_log_retention`, as their attempts): a scan
        in id order, no index (ledger.models.retention)."""
        return self.filter(created_at__lt=before)


class JobStopwatch(models.Model):
    job_id = models.CharField(max_length=36)
    plugin = models.CharField(max_length=200)
    command = models.CharField(max_length=200, default="")
    step_name = models.CharField(max_length=200, null=True, blank=True)
    attempt = models.IntegerField(default=1)
    enter_wall_ns = models.BigIntegerField()
    exit_wall_ns = models.BigIntegerField()
    dur_ns = models.BigIntegerField()  # monotonic spawn duration: the number to compare
    runtime_pre_ns = models.BigIntegerField(default=0)
    runtime_post_ns = models.BigIntegerField(default=0)
    status = models.CharField(max_length=16, choices=StopwatchStatus.choices)
    subs_json = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    objects = JobStopwatchQuerySet.as_manager()

    class Meta:
        db_table = "job_stopwatch"
        verbose_name_plural = "job stopwatches"  # Django's default adds an "s": "job stopwatchs"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["job_id"], name="job_stopwatch_job_idx"),  # read by job inspect
            models.Index(fields=["plugin", "created_at"], name="job_stopwatch_plugin_idx"),  # GET /stopwatch/{plugin}
        ]

    def __str__(self) -> str:
        return f"{self.plugin} {self.job_id} {self.dur_ns}ns"
