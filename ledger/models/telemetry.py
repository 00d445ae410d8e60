"""`job_stopwatch`: one immutable timing record per plugin invocation (spec "Stopwatch")."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class StopwatchStatus(models.TextChoices):
    OK = "ok"
    ERR = "err"
    TIMEOUT = "timeout"
    CAPTURE_ERROR = "capture_error"


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

    class Meta:
        db_table = "job_stopwatch"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["job_id"], name="job_stopwatch_job_idx"),  # read by job inspect
            models.Index(fields=["plugin", "created_at"], name="job_stopwatch_plugin_idx"),  # GET /stopwatch/{plugin}
        ]

    def __str__(self) -> str:
        return f"{self.plugin} {self.job_id} {self.dur_ns}ns"
