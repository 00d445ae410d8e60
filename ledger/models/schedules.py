"""`schedule_entries`: the scheduler's durable state, one row per (plugin, schedule id), so
catch-up and next-run are stable across restarts (spec 000 "Scheduler", State Tracking)."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q
from django.utils import timezone


class ScheduleStatus(models.TextChoices):
    ACTIVE = "active"
    PAUSED_INVALID = "paused_invalid"
    PAUSED_MANUAL = "paused_manual"
    EXHAUSTED = "exhausted"  # a one-shot (`at`, `after`) that has fired


class ScheduleEntryQuerySet(models.QuerySet["ScheduleEntry"]):
    def active(self) -> ScheduleEntryQuerySet:
        return self.filter(status=ScheduleStatus.ACTIVE)

    def due(self, now: datetime) -> ScheduleEntryQuerySet:
        return self.active().filter(next_run_at__lte=now).order_by("next_run_at")


class ScheduleEntry(models.Model):
    plugin = models.CharField(max_length=200)
    schedule_id = models.CharField(max_length=200)
    command = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=ScheduleStatus.choices, default=ScheduleStatus.ACTIVE)
    reason = models.TextField(null=True, blank=True)  # why it is paused
    # BLAKE3 of the entry's definition: a changed schedule gets a fresh next run, an unchanged one
    # keeps its state across restarts and reloads.
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_job_id = models.CharField(max_length=36, null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_success_job_id = models.CharField(max_length=36, null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = ScheduleEntryQuerySet.as_manager()

    class Meta:
        db_table = "schedule_entries"
        constraints = [models.UniqueConstraint(fields=["plugin", "schedule_id"], name="schedule_entries_uniq")]
        indexes = [
            # Read by ScheduleEntryQuerySet.due at every scheduler tick.
            models.Index(fields=["next_run_at"], name="schedule_entries_due_idx", condition=Q(status="active")),
        ]

    def __str__(self) -> str:
        return f"{self.plugin}:{self.schedule_id} {self.status} next {self.next_run_at}"

    @property
    def address(self) -> str:
        return f"{self.plugin}:{self.schedule_id}"

    # -- state changes: one method each ----------------------------------------------------------

    def take(self, *, next_run_at: datetime | None, now: datetime, exhausted: bool = False) -> bool:
        """Claim this due run for the caller: compare-and-set on the `next_run_at` we read. False
        when another scheduler (or a pause) got there first; then the caller must not fire."""
        status = ScheduleStatus.EXHAUSTED if exhausted else ScheduleStatus.ACTIVE
        # Why the guard on next_run_at: two schedulers read the same due row; only the one whose
        # UPDATE still finds the old value moves it on, so the run fires exactly once.
        won = (
            ScheduleEntry.objects.filter(pk=self.pk, status=ScheduleStatus.ACTIVE, next_run_at=self.next_run_at).update(
                next_run_at=next_run_at, last_fired_at=now, status=status, updated_at=now
            )
            == 1
        )
        if won:
            self.next_run_at, self.last_fired_at, self.status, self.updated_at = next_run_at, now, status, now
        return won

    def fired(self, job_id: str, *, now: datetime) -> None:
        self.last_job_id, self.updated_at = job_id, now
        self.save(update_fields=["last_job_id", "updated_at"])

    def succeeded(self, job_id: str, at: datetime) -> None:
        self.last_success_job_id, self.last_success_at = job_id, at
        self.save(update_fields=["last_success_job_id", "last_success_at"])

    def pause(self, reason: str, *, manual: bool, now: datetime) -> None:
        self.status = ScheduleStatus.PAUSED_MANUAL if manual else ScheduleStatus.PAUSED_INVALID
        self.reason, self.updated_at = reason, now
        self.save(update_fields=["status", "reason", "updated_at"])

    def resume(self, *, next_run_at: datetime | None, now: datetime) -> None:
        self.status, self.reason, self.next_run_at, self.updated_at = ScheduleStatus.ACTIVE, None, next_run_at, now
        self.save(update_fields=["status", "reason", "next_run_at", "updated_at"])

    def redefine(self, *, command: str, fingerprint: str, next_run_at: datetime | None, now: datetime) -> None:
        """The config changed this entry's definition: a fresh start (a manual pause stays)."""
        self.command, self.fingerprint, self.next_run_at, self.updated_at = command, fingerprint, next_run_at, now
        fields = ["command", "fingerprint", "next_run_at", "updated_at"]
        if self.status in (ScheduleStatus.PAUSED_INVALID, ScheduleStatus.EXHAUSTED):
            self.status, self.reason = ScheduleStatus.ACTIVE, None
            fields += ["status", "reason"]
        self.save(update_fields=fields)
