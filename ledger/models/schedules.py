"""`schedule_entries`: the scheduler's durable state, one row per (plugin, schedule id), so
catch-up and next-run are stable across restarts (spec 000 "Scheduler", State Tracking)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, models
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.utils import timezone

from ledger import sql
from ledger.models.jobs import Job
from ledger.states import ActionRefused
from ledger.timestamps import rfc3339
from ledger.writes.transaction import writing


class ScheduleStatus(models.TextChoices):
    ACTIVE = "active"
    PAUSED_INVALID = "paused_invalid"
    PAUSED_MANUAL = "paused_manual"
    EXHAUSTED = "exhausted"  # a one-shot (`at`, `after`) that has fired


# A run the scheduler can learn from: it ended for good (a retried failure is re-queued in the
# transaction that records it, so a resting failed row is final).
ENDED = ("succeeded", "failed", "timed_out", "dead")


@dataclass(frozen=True)
class Outcome:
    """How an entry's last run ended."""

    entry_id: int
    plugin: str
    schedule_id: str
    job_id: str
    succeeded: bool
    ended_at: datetime


@dataclass(frozen=True)
class Take:
    """One due run to claim: the row as read, and where its `next_run_at` moves when claimed."""

    entry_id: int
    due: datetime  # the `next_run_at` the scheduler read
    following: datetime | None
    exhausted: bool  # a fired one-shot


class ScheduleEntryQuerySet(models.QuerySet["ScheduleEntry"]):
    def active(self) -> ScheduleEntryQuerySet:
        return self.filter(status=ScheduleStatus.ACTIVE)

    def due(self, now: datetime) -> ScheduleEntryQuerySet:
        return self.active().filter(next_run_at__lte=now).order_by("next_run_at")

    def passed_while_paused(self, now: datetime) -> ScheduleEntryQuerySet:
        """Entries paused by hand whose next run has come: each is announced as skipped once."""
        return self.filter(status=ScheduleStatus.PAUSED_MANUAL, next_run_at__lte=now).order_by("next_run_at")

    def pass_over(self, entry_id: int, due: datetime, following: datetime | None, *, now: datetime) -> bool:
        """Move a paused entry's run due at `due` on to `following`, unless another scheduler (or
        a resume) moved it first (compare-and-set, as `take`). Call inside the announcing
        transaction; True when this caller moved it."""
        with writing():
            moved = sql.update(
                ScheduleEntry,
                {"next_run_at": following, "updated_at": now},
                {"id": entry_id, "status": ScheduleStatus.PAUSED_MANUAL, "next_run_at": due},
            )
        return moved == 1

    def unsettled(self) -> list[Outcome]:
        """Entries whose last run has ended since the scheduler last took one into account (its
        id is not `settled_job_id`): a success to record, or a failure (failed, timed out, dead)."""
        # Only rows whose last job has ended: a queued or running one would be re-read on every
        # tick for nothing (28 ms a tick with 1,000 such entries, docs/performance.md).
        last = Job.objects.filter(pk=OuterRef("last_job_id"))
        rows = (
            self.exclude(last_job_id=None)
            .filter(Q(settled_job_id=None) | ~Q(settled_job_id=F("last_job_id")))
            .filter(Exists(last.filter(status__in=ENDED)))
            .annotate(
                job_status=Subquery(last.values("status")[:1]), ended_at=Subquery(last.values("completed_at")[:1])
            )
            .values_list("pk", "plugin", "schedule_id", "last_job_id", "job_status", "ended_at")
        )
        return [
            Outcome(pk, plugin, schedule_id, str(job_id), status == "succeeded", ended_at)
            for pk, plugin, schedule_id, job_id, status, ended_at in rows
        ]

    def settle(self, outcomes: Iterable[tuple[Outcome, datetime | None]], *, now: datetime) -> None:
        """Take these ended runs into account: a success into `last_success_*`, and each entry's
        next run where the caller moved it (`every` counts from its runs' ends). Guarded on
        `last_job_id`: an entry fired again since the read is left to the next tick."""
        text = sql.native(sql.SCHEDULE_SETTLED, sql.current().vendor)
        stamp = sql.prep(ScheduleEntry, "updated_at", now)

        def prep(column: str, value: datetime | None) -> Any:
            return sql.prep(ScheduleEntry, column, value)

        rows = [
            (
                o.job_id,
                o.job_id if o.succeeded else None,
                prep("last_success_at", o.ended_at if o.succeeded else None),
                prep("next_run_at", following),
                stamp,
                o.entry_id,
                o.job_id,
            )
            for o, following in outcomes
        ]
        if rows:
            with writing():
                sql.execute_many(text, rows)

    def take(self, takes: Iterable[Take], *, now: datetime) -> set[int]:
        """Claim due runs for the caller: compare-and-set on the `next_run_at` each was read with.
        Returns the ids won; a run not won was fired by another scheduler (or paused meanwhile)
        and the caller must not fire it. Call inside the transaction that fires the runs."""
        groups: dict[tuple[datetime, datetime | None, bool], list[int]] = defaultdict(list)
        for take in takes:
            groups[(take.due, take.following, take.exhausted)].append(take.entry_id)
        won: set[int] = set()
        vendor = sql.current().vendor
        with writing():
            for (due, following, exhausted), ids in groups.items():
                won.update(self._take_group(ids, due, following, exhausted, now=now, vendor=vendor))
        return won

    def _take_group(
        self, ids: list[int], due: datetime, following: datetime | None, exhausted: bool, *, now: datetime, vendor: str
    ) -> list[int]:
        status = ScheduleStatus.EXHAUSTED if exhausted else ScheduleStatus.ACTIVE
        stamp = sql.prep(ScheduleEntry, "updated_at", now)
        params = [sql.prep(ScheduleEntry, "next_run_at", following), stamp, status, stamp]
        params += [*ids, ScheduleStatus.ACTIVE, sql.prep(ScheduleEntry, "next_run_at", due)]
        taken = sql.fetch_rows(sql.schedule_take(len(ids), vendor), params)  # why: at sql.schedule_take
        return [row[0] for row in taken]

    def record_fired(self, last_jobs: Mapping[int, str], *, now: datetime) -> None:
        """Each fired entry's newest job, in the transaction that enqueued it."""
        text = sql.native(sql.SCHEDULE_FIRED, sql.current().vendor)
        stamp = sql.prep(ScheduleEntry, "updated_at", now)
        with writing():
            sql.execute_many(text, [(job_id, stamp, entry_id) for entry_id, job_id in last_jobs.items()])

    def first_seen(
        self,
        plugin: str,
        schedule_id: str,
        *,
        command: str,
        fingerprint: str,
        next_run_at: datetime | None,
        now: datetime,
    ) -> ScheduleEntry:
        """The row of a configured schedule, made when a scheduler first sees it."""
        try:
            with writing():
                return self.create(
                    plugin=plugin,
                    schedule_id=schedule_id,
                    command=command,
                    fingerprint=fingerprint,
                    next_run_at=next_run_at,
                    created_at=now,
                    updated_at=now,
                )
        except IntegrityError:
            # Why: schedulers started together both find no row; the unique key lets one create
            # it and the other adopts that row (same config, same next run).
            return self.get(plugin=plugin, schedule_id=schedule_id)


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
    # The last run whose end the scheduler has taken into account (`settle`).
    settled_job_id = models.CharField(max_length=36, null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = ScheduleEntryQuerySet.as_manager()

    class Meta:
        db_table = "schedule_entries"
        verbose_name_plural = "schedule entries"
        permissions = [("pause_schedule", "Can pause and resume a schedule entry")]
        constraints = [models.UniqueConstraint(fields=["plugin", "schedule_id"], name="schedule_entries_uniq")]
        indexes = [
            # Read by ScheduleEntryQuerySet.due at every scheduler tick.
            models.Index(fields=["next_run_at"], name="schedule_entries_due_idx", condition=Q(status="active")),
            # And by passed_while_paused.
            models.Index(
                fields=["next_run_at"], name="schedule_entries_paused_idx", condition=Q(status="paused_manual")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.plugin}:{self.schedule_id} {self.status} next {self.next_run_at}"

    @property
    def address(self) -> str:
        return f"{self.plugin}:{self.schedule_id}"

    # -- state changes: one method each ----------------------------------------------------------

    @property
    def can_pause(self) -> bool:
        return self.status == ScheduleStatus.ACTIVE

    @property
    def can_resume(self) -> bool:
        return self.status == ScheduleStatus.PAUSED_MANUAL

    def pause_by_hand(self, *, by: str, now: datetime) -> None:
        """`schedule pause` and the console's Pause: kept across restarts and reloads."""
        if not self.can_pause:
            raise ActionRefused(f"{self.address} is {self.status}; only an active entry can be paused")
        self.pause(f"paused by {by} at {rfc3339(now, 'seconds')}", manual=True, now=now)

    def pause(self, reason: str, *, manual: bool, now: datetime) -> None:
        self.status = ScheduleStatus.PAUSED_MANUAL if manual else ScheduleStatus.PAUSED_INVALID
        self.reason, self.updated_at = reason, now
        with writing():
            self.save(update_fields=["status", "reason", "updated_at"])

    def resume_by_hand(self, *, next_run_at: datetime | None, now: datetime) -> None:
        """`schedule resume` and the console's Resume: a manual pause only (an invalid entry is
        resumed by fixing its config, an exhausted one-shot by redefining it)."""
        if not self.can_resume:
            raise ActionRefused(f"{self.address} is {self.status}; only a manually paused entry can be resumed")
        self.resume(next_run_at=next_run_at, now=now)

    def resume(self, *, next_run_at: datetime | None, now: datetime) -> None:
        self.status, self.reason, self.next_run_at, self.updated_at = ScheduleStatus.ACTIVE, None, next_run_at, now
        with writing():
            self.save(update_fields=["status", "reason", "next_run_at", "updated_at"])

    def redefine(self, *, command: str, fingerprint: str, next_run_at: datetime | None, now: datetime) -> None:
        """The config changed this entry's definition: a fresh start (a manual pause stays)."""
        self.command, self.fingerprint, self.next_run_at, self.updated_at = command, fingerprint, next_run_at, now
        fields = ["command", "fingerprint", "next_run_at", "updated_at"]
        if self.status in (ScheduleStatus.PAUSED_INVALID, ScheduleStatus.EXHAUSTED):
            self.status, self.reason = ScheduleStatus.ACTIVE, None
            fields += ["status", "reason"]
        with writing():
            self.save(update_fields=fields)
