"""`job_queue`, `job_transitions` and `job_log`: every unit of work and every state change.

Spec 000 §3 (Work Queue), §12 (schema), "Database Reference". Table and column names are the
spec's so the operator queries there run unchanged in `sqlite3`. Every state change is a
compare-and-set UPDATE checked by its row count, then an appended transition row.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ledger import django_internals, sql
from ledger.caps import Cap
from ledger.ids import new_id
from ledger.job_notifications import notify_enqueued, notify_finished
from ledger.models.attempts import JobAttempt
from ledger.models.breakers import record_scheduled_outcome
from ledger.models.context import EventContext
from ledger.models.egress import EgressHost
from ledger.models.events import EventRecord
from ledger.models.facts import write_state
from ledger.models.retention import PrunableQuerySet
from ledger.models.telemetry import JobStopwatch
from ledger.models.workers import PluginInstanceRecord
from ledger.states import TERMINAL, ActionRefused, JobStatus, check_transition
from ledger.submitters import Submitter
from ledger.timestamps import rfc3339
from ledger.writes.transaction import writing

log = logging.getLogger("ductile.queue")

# What an operator may send back to the queue by hand ("retry now").
RETRYABLE_BY_HAND = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.DEAD})


# `job_queue.submitted_by` holds 64 characters: a long console user name is cut to fit.
SUBMITTED_BY_LENGTH = 64


class InvalidJob(ValueError):
    """A JobSpec the queue cannot take (no target, no submitter, no attempt to make)."""


class LostJob(Exception):
    """A state change lost its compare-and-set: someone else moved the job first."""


@dataclass(frozen=True)
class JobSpec:
    """What a producer asks the queue for."""

    plugin: str
    command: str
    submitter: Submitter
    payload: Mapping[str, Any] | None = None
    event: Mapping[str, Any] | None = None
    dedupe_key: str | None = None
    dedupe_ttl: float | None = None  # per-enqueue override (spec §3.6); also guards in-flight duplicates
    max_attempts: int = 4
    parent_job_id: str | None = None
    source_event_id: str | None = None
    event_context_id: str | None = None
    route_depth: int = 0
    # A pipeline hop: (pipeline, step, baggage) gets its own event_context row, child of
    # `event_context_id`.
    step: tuple[str, str, Mapping[str, Any]] | None = None
    # Why this job cannot start (depth exhausted, a baggage claim failed): it is recorded in
    # `refusal_status` (`dead`, or `failed` for a step whose own claim failed).
    refusal: str | None = None
    refusal_status: str = JobStatus.DEAD
    # A pipeline instance's shared root row to write first: (id, parent id, pipeline, baggage).
    # `event_context_id` then names it, as the parent of this hop's own row (`step`).
    root_context: tuple[str, str | None, str, Mapping[str, Any]] | None = None
    # Said in the enqueue transition, e.g. "replay of <job id>".
    note: str | None = None
    # The producer applied its own duplicate policy (the scheduler's if_running and poll guard):
    # the key is kept for tracing and same-key run exclusion, not checked again here.
    dedupe_checked: bool = False
    # Who acted for the submitter (the console's `admin:alice`): the audit trail only.
    actor: str | None = None

    def __post_init__(self) -> None:
        # The ledger's own floor, whoever the producer: a row without a target or a submitter, or
        # one that may never run, is refused here with what was wrong (the intake checks the rest).
        for name in ("plugin", "command"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidJob(f"job {name} must be a non-empty string, got {value!r}")
        if not isinstance(self.submitter, Submitter):
            choices = ", ".join(s.value for s in Submitter)
            raise InvalidJob(f"job submitted_by must be one of {choices}, got {self.submitter!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise InvalidJob(f"job max_attempts must be an integer of at least 1, got {self.max_attempts!r}")
        if self.dedupe_key is not None and not self.dedupe_key.strip():
            # Whitespace is no key (the original trims it): "   " must not dedupe every job that sends it.
            object.__setattr__(self, "dedupe_key", None)

    @property
    def submitted_by(self) -> str:
        return self.submitter.by(self.actor)[:SUBMITTED_BY_LENGTH]


@dataclass(frozen=True)
class ClaimReads:
    """What a worker needs of other tables to start a job it claimed, read by the claim itself
    (ledger.sql.CLAIM_READS): the plugin's state for the request and the job's pipeline hop."""

    state: dict[str, Any]
    hop: tuple[str | None, str | None, dict[str, Any]] | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ClaimReads:
        state, context_id, pipeline, step, baggage = row
        state = sql.json_value(state)
        hop = None if context_id is None else (pipeline, step, sql.json_value(baggage) or {})
        return cls(state if isinstance(state, dict) else {}, hop)


@dataclass(frozen=True)
class QueueLook:
    """An idle worker's look at the queue (JobQuerySet.look)."""

    due: bool  # a queued job can be claimed now, unless its plugin is at its cap
    queued: bool  # a job is queued, due or waiting for its retry time


@dataclass(frozen=True)
class EnqueueResult:
    job_id: str
    deduplicated: bool = False
    # The job's status as the enqueue left it: `queued`, or the matched job's when deduplicated.
    status: str = JobStatus.QUEUED


@dataclass
class AttemptOutcome:
    """What one run of a plugin came to, ready to be recorded in one transaction."""

    status: str  # succeeded | failed | timed_out
    error: str | None = None
    retryable: bool = True
    response_text: str | None = None
    stderr: str = ""
    backoff_base: float = 30.0
    children: list[JobSpec] = field(default_factory=list)
    # (plugin_name, fact_type or None for write-through, snapshot)
    state_write: tuple[str, str | None, dict[str, Any]] | None = None
    stopwatch: dict[str, Any] | None = None
    # Appended to event_log in the same transaction: preflight, emitted and lifecycle events.
    events: list[dict[str, Any]] = field(default_factory=list)
    # Set for scheduler-originated jobs: the circuit breaker's failure threshold for this target.
    breaker_threshold: int | None = None
    # The sandbox profile the plugin ran under, and the hosts it asked the egress proxy for:
    # (host:port, allowed|refused, requests).
    sandbox: str | None = None
    egress: list[tuple[str, str, int]] = field(default_factory=list)
    # When a retried attempt's successor is due, decided before recording so that the
    # `job.retry_scheduled` event announces the very time the row gets; None: computed here.
    retry_at: datetime | None = None

    def final_status(self, attempt: int, max_attempts: int) -> str | None:
        """The status this outcome leaves its job in for good, or None when the job will be
        retried: the one rule, used to record the outcome and by whoever needs to know first
        (lifecycle hooks fire only on a job's final outcome). Spec 000 §3.3, §5.7."""
        if self.status == JobStatus.SUCCEEDED:
            return JobStatus.SUCCEEDED
        if not self.retryable:
            return self.status
        return JobStatus.DEAD if attempt >= max_attempts else None


# What announces a lost job's end (`JobQuerySet.recover_lost`): adds events and jobs to its outcome.
Ending = Callable[["Job", AttemptOutcome], None]


def _below(cap: Cap | int, running: tuple[int, int]) -> bool:
    """Whether one more job of a plugin may start: (running everywhere, running on this node)."""
    everywhere, mine = running
    if isinstance(cap, int):
        return everywhere < cap
    return (cap.cluster is None or everywhere < cap.cluster) and mine < cap.node


# A claim undone by its check (`_recheck`) lost a race for the plugin's last slot or its key: the
# next try counts again. Three, because each lost race means another claimer just succeeded.
_CLAIM_TRIES = 3


@dataclass(frozen=True)
class _Undone:
    """A claim its check undid; `full`: the plugin found at its cap, None for a running twin."""

    full: str | None


def _recheck(job: Job, cap: Cap | int, worker_id: str, slots: int | None) -> _Undone | None:
    """PostgreSQL: the claim of `job` checked again against the rules it was picked by, each under
    the lock of what it counts (why: at ledger.sql.CAP_LOCK); None when it holds."""
    if _cap_binds(cap, slots):
        sql.execute(sql.CAP_LOCK, [job.plugin]).close()
        everywhere, mine = sql.fetch_row(sql.RUNNING_OF, [worker_id, job.plugin]) or (0, 0)
        # The counts include this claim: were it not made, would it still be allowed?
        if not _below(cap, (int(everywhere) - 1, int(mine) - 1)):
            return _Undone(job.plugin)
    if job.dedupe_key is not None:
        sql.execute(sql.KEY_LOCK, [f"{job.plugin}\x1f{job.command}\x1f{job.dedupe_key}"]).close()
        if sql.fetch_value(sql.TWIN_RUNNING, [job.plugin, job.command, job.dedupe_key, job.id]):
            return _Undone(None)
    return None


def _cap_binds(cap: Cap | int, slots: int | None) -> bool:
    """Whether concurrent claims could exceed `cap`: a cap across nodes always could; a node's only
    when this worker runs more jobs at once than it allows (or we do not know how many)."""
    if isinstance(cap, int) or cap.cluster is not None:
        return True
    return slots is None or cap.node < slots


def backoff_seconds(attempt: int, base: float, rng: random.Random | None = None) -> float:
    """Spec §5.7: base * 2^(attempt-1) + random(0, base), `attempt` being the one that failed."""
    return float(base * 2 ** (attempt - 1) + (rng or random).uniform(0, base))


def trigger_event(spec: JobSpec, job_id: str, now: datetime) -> dict[str, Any]:
    """Every job carries an event so a plugin always reads its input from `event.payload`."""
    if spec.event is not None:
        return dict(spec.event)
    event: dict[str, Any] = {
        "type": f"{spec.submitter.value}.trigger",
        "payload": dict(spec.payload or {}),
        "source": spec.submitter.value,
        "timestamp": rfc3339(now),
        "event_id": new_id(),
    }
    if spec.dedupe_key:
        event["dedupe_key"] = spec.dedupe_key
    return event


def _new_job(spec: JobSpec, context_id: str | None, now: datetime) -> Job:
    job = Job(
        id=new_id(),
        plugin=spec.plugin,
        command=spec.command,
        payload=dict(spec.payload) if spec.payload is not None else None,
        status=JobStatus.QUEUED,
        attempt=1,
        max_attempts=spec.max_attempts,
        submitted_by=spec.submitted_by,
        dedupe_key=spec.dedupe_key,
        created_at=now,
        parent_job_id=spec.parent_job_id,
        source_event_id=spec.source_event_id,
        event_context_id=context_id,
        route_depth=spec.route_depth,
    )
    job.event = trigger_event(spec, job.id, now)
    return job


def _job_row(job: Job) -> dict[str, Any]:
    return {str(f.column): getattr(job, f.attname) for f in Job._meta.concrete_fields}


def _enqueue_reason(spec: JobSpec) -> str:
    return f"enqueued by {spec.submitted_by}" + (f": {spec.note}" if spec.note else "")


class JobQuerySet(PrunableQuerySet["Job"]):
    def queued(self) -> JobQuerySet:
        return self.filter(status=JobStatus.QUEUED)

    def running(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def terminal(self) -> JobQuerySet:
        return self.filter(status__in=TERMINAL)

    def for_target(self, plugin: str, command: str) -> JobQuerySet:
        return self.filter(plugin=plugin, command=command)

    def look(self, plugins: Collection[str], now: datetime) -> QueueLook:
        """Whether a queued job of `plugins` is due at `now` (its retry time passed, or none), and
        whether any is queued at all: one hand-written statement (ledger.sql.look)."""
        if not plugins:
            return QueueLook(due=False, queued=False)
        text = sql.look(len(plugins), sql.current().vendor)
        row = sql.fetch_row(text, [*plugins, sql.prep(Job, "next_retry_at", now), *plugins])
        return QueueLook(due=bool(row and row[0]), queued=bool(row and row[1]))

    def expired(self, before: datetime) -> JobQuerySet:
        """Finished before `before` (now minus `job_queue_retention`): no longer needed for dedupe
        windows or same-key exclusion. Never a queued or running job."""
        return self.terminal().filter(completed_at__lt=before)

    # -- producers ---------------------------------------------------------------------------

    def enqueue(self, spec: JobSpec, *, default_dedupe_ttl: float, now: datetime | None = None) -> EnqueueResult:
        """The one way work enters the queue (idiom 1). Dedupe is per target (plugin + command)."""
        now = now or timezone.now()
        with writing(savepoint=False):
            if spec.root_context is not None:
                # First, whatever this hop becomes: the instance's other branches point to it.
                root_id, parent_id, pipeline, accumulated = spec.root_context
                EventContext.record(
                    context_id=root_id,
                    parent_id=parent_id,
                    pipeline=pipeline,
                    step="",
                    accumulated=accumulated,
                    now=now,
                )
            if spec.dedupe_key and not spec.dedupe_checked:
                existing = self._duplicate_of(spec, default_dedupe_ttl, now)
                if existing is not None:
                    log.info(
                        "deduplicated %s.%s: an earlier job holds the key",
                        spec.plugin,
                        spec.command,
                        extra={"plugin": spec.plugin, "dedupe_key": spec.dedupe_key, "existing_job_id": existing[0]},
                    )
                    return EnqueueResult(existing[0], deduplicated=True, status=existing[1])
            if not spec.refusal:
                notify_enqueued()  # first: other processes' workers wake while this commits
            context_id = spec.event_context_id
            if spec.step is not None:
                context_id = EventContext.record(
                    parent_id=spec.event_context_id,
                    pipeline=spec.step[0],
                    step=spec.step[1],
                    accumulated=spec.step[2],
                    now=now,
                )
            job = _new_job(spec, context_id, now)
            sql.insert(Job, _job_row(job))
            JobTransition.record(job, None, JobStatus.QUEUED, _enqueue_reason(spec), now=now)
            if spec.refusal:
                job.move(spec.refusal_status, spec.refusal, now=now, completed_at=now, last_error=spec.refusal)
        return EnqueueResult(job.id, status=job.status)

    def enqueue_many(self, specs: Sequence[JobSpec], *, now: datetime) -> list[str]:
        """Jobs whose admission their producer has already decided (the scheduler firing many
        due entries at once): one batched insert each for the jobs and their transitions and one
        wake-up, instead of a savepoint and two statements per job (docs/performance.md,
        "Scheduler"). No dedupe check, pipeline hop or refusal here: those need `enqueue`."""
        for spec in specs:
            if (
                spec.step is not None
                or spec.refusal
                or spec.root_context
                or (spec.dedupe_key and not spec.dedupe_checked)
            ):
                raise ValueError(f"enqueue_many takes decided jobs only; {spec.plugin}.{spec.command} needs enqueue")
        jobs = [_new_job(spec, spec.event_context_id, now) for spec in specs]
        if not jobs:
            return []
        with writing():
            sql.insert_many(Job, [_job_row(job) for job in jobs])
            sql.insert_many(
                JobTransition,
                [
                    JobTransition.row(job, None, JobStatus.QUEUED, _enqueue_reason(spec), now=now)
                    for job, spec in zip(jobs, specs, strict=True)
                ],
            )
            notify_enqueued()
        return [job.id for job in jobs]

    def _duplicate_of(self, spec: JobSpec, default_ttl: float, now: datetime) -> tuple[str, str] | None:
        """The id and status of the job that holds `spec`'s key, read by the same statement."""
        same = self.for_target(spec.plugin, spec.command).filter(dedupe_key=spec.dedupe_key)
        if spec.dedupe_ttl is not None:
            in_flight = same.filter(status__in=(JobStatus.QUEUED, JobStatus.RUNNING)).values_list("id", "status")
            if (found := in_flight.first()) is not None:
                return found
        ttl = spec.dedupe_ttl if spec.dedupe_ttl is not None else default_ttl
        recent = same.filter(status=JobStatus.SUCCEEDED, completed_at__gte=now - timedelta(seconds=ttl))
        return recent.order_by("-completed_at").values_list("id", "status").first()

    # -- workers -------------------------------------------------------------------------------

    def claim_next(
        self,
        *,
        worker_id: str,
        caps: Mapping[str, Cap | int],
        lease_ttl: float,
        now: datetime | None = None,
        only: str | None = None,
        slots: int | None = None,
    ) -> Job | None:
        """Take the oldest runnable job for one of `caps`' plugins (FIFO with smart dequeue).

        Skipped, never starved behind: jobs waiting for `next_retry_at`, jobs of a plugin at its
        parallelism cap across the nodes or on this worker's node, and jobs whose same-key
        same-target twin is running (spec §3.5, §3.6). A cap given as a number is one node's view
        (the spec's `parallelism`): the same limit across nodes and on this one. `slots`: how many
        jobs `worker_id` runs at once (its threads), when known: its claims cannot exceed a node
        cap of that many or more, so they need no check for one.
        One write transaction; the pick and the compare-and-set are a single UPDATE.
        """
        now = now or timezone.now()
        caps = dict(caps)
        for _ in range(_CLAIM_TRIES):
            claimed = self._claim_once(worker_id, caps, lease_ttl, now, only, slots)
            if not isinstance(claimed, _Undone):
                return claimed
            # Why not again inside a caller's transaction (a completion claiming its worker's next
            # job): it keeps the lock the undone claim took, and a second claim taking another
            # could wait on a claimer waiting for the first. The caller claims again on its own.
            if django_internals.in_transaction(sql.current()):
                return None
            if claimed.full is not None:
                caps.pop(claimed.full)  # at its cap, as the check just counted
        return None

    def _claim_once(
        self,
        worker_id: str,
        caps: Mapping[str, Cap | int],
        lease_ttl: float,
        now: datetime,
        only: str | None,
        slots: int | None,
    ) -> Job | _Undone | None:
        conn = sql.current()
        postgres = conn.vendor == "postgresql"
        with writing(savepoint=False):
            cursor = sql.execute(sql.running_counts(conn.vendor), [worker_id], conn)
            running = {plugin: (everywhere, mine) for plugin, everywhere, mine in cursor.fetchall()}
            cursor.close()
            open_plugins = [p for p, cap in caps.items() if _below(cap, running.get(p, (0, 0)))]
            if not open_plugins:
                return None
            params: list[Any] = [
                worker_id,
                sql.prep(Job, "lease_until", now + timedelta(seconds=lease_ttl)),
                sql.prep(Job, "started_at", now),
                *open_plugins,
                sql.prep(Job, "next_retry_at", now),
            ]
            if only is not None:
                params.append(only)
            columns = sql.select_columns(Job)
            text = sql.claim(len(open_plugins), only is not None, conn.vendor, f"{columns}, {sql.CLAIM_READS}")
            cursor = sql.execute(text, params, conn)
            row = cursor.fetchone()
            cursor.close()
            if row is None:
                return None
            fields = len(sql.plan(Job).columns)
            job: Job = sql.from_row(Job, row[:fields])
            if postgres:
                was = row[len(row) - len(sql.WAS) :]
                row = row[: len(row) - len(sql.WAS)]
                undone = _recheck(job, caps[job.plugin], worker_id, slots)
                if undone is not None:
                    sql.execute(sql.UNCLAIM, [*was, job.id], conn).close()
                    return undone
            job.claim_reads = ClaimReads.from_row(row[fields:])
            JobTransition.record(
                job, JobStatus.QUEUED, JobStatus.RUNNING, f"claimed by {worker_id}", now=now, worker=worker_id
            )
            return job

    def tree(self, root_ids: Iterable[str], limit: int | None = None) -> list[Job]:
        """Every job in the trees under `root_ids`, parents before children (level by level); with
        `limit`, the first `limit` of them (the console's page of a huge fan-out)."""
        found: list[Job] = list(self.filter(pk__in=list(root_ids)).order_by("created_at"))
        frontier = [j.id for j in found]
        while frontier and (limit is None or len(found) < limit):
            children = self.filter(parent_job_id__in=frontier).order_by("created_at")
            level = list(children if limit is None else children[: limit - len(found)])
            found += level
            frontier = [c.id for c in level]
        return found

    def heartbeat(self, worker_id: str, job_ids: Collection[str], lease_ttl: float, now: datetime | None = None) -> int:
        """Extend the leases of `job_ids`, the jobs `worker_id` is really running; the count tells
        the caller how many it still owns. Why not every job claimed by `worker_id`: a job whose
        execution died without recording an outcome would then be renewed for as long as the
        worker lives, never recovered, and hold a parallelism slot; left out, its lease expires
        and `recover_lost` gives it its next attempt."""
        if not job_ids:
            return 0
        now = now or timezone.now()
        mine = self.running().filter(pk__in=list(job_ids), claimed_by=worker_id)
        with writing():
            return mine.update(lease_until=now + timedelta(seconds=lease_ttl))

    def lost(self, *, now: datetime, dead_workers: Collection[str] = ()) -> JobQuerySet:
        """Running jobs whose owner is gone: lease expired, or owner known dead (its PID is gone)."""
        return self.running().filter(Q(lease_until__lt=now) | Q(claimed_by__in=list(dead_workers)))

    def recover_lost(
        self,
        *,
        now: datetime | None = None,
        dead_workers: Collection[str] = (),
        ending: Ending | None = None,
        default_dedupe_ttl: float = 0.0,
    ) -> list[Job]:
        """At-least-once: give every lost job its next attempt, or end it `dead` (spec §11.2).
        `ending` adds to the outcome of a job that ends dead the events and jobs that announce it
        (its lifecycle hooks: gateway.execution.dispatch.announce_end), recorded in the same
        transaction as its end."""
        now = now or timezone.now()
        recovered: list[Job] = []
        # Why the probe: this pass runs every few seconds in every daemon, idle ones too, and the
        # ORM's query for lost jobs cost ~1 ms of CPU to build; with no running job, none is lost.
        if sql.fetch_row(sql.ANY_RUNNING, []) is None:
            return recovered
        for job in list(self.lost(now=now, dead_workers=dead_workers)):
            reason = (
                f"worker {job.claimed_by} is gone (process exited)"
                if job.claimed_by in dead_workers or job.lease_until is None  # `lost`: one or the other
                else f"lease of worker {job.claimed_by} expired at {rfc3339(job.lease_until, 'seconds')}"
            )
            try:
                with writing():
                    job.abandon(
                        reason,
                        now=now,
                        dead_owner=job.claimed_by in dead_workers,
                        ending=ending,
                        default_dedupe_ttl=default_dedupe_ttl,
                    )
            except LostJob:
                continue  # its owner finished it after all, or another process recovered it first
            recovered.append(job)
        return recovered

    def cancel_queued(
        self, plugins: Iterable[str], reason: str, now: datetime | None = None, dedupe_key: str | None = None
    ) -> list[str]:
        """Queued jobs of removed or disabled plugins (spec §11.3), or one schedule's queued runs
        (`if_running: cancel`), go `dead` with the reason."""
        now = now or timezone.now()
        cancelled = []
        waiting = self.queued().filter(plugin__in=list(plugins))
        if dedupe_key is not None:
            waiting = waiting.filter(dedupe_key=dedupe_key)
        for job in list(waiting):
            try:
                job._bury(reason, now=now)
            except LostJob:
                continue
            cancelled.append(job.id)
        return cancelled


class Job(models.Model):
    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    plugin = models.CharField(max_length=200)
    command = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    attempt = models.IntegerField(default=1)
    max_attempts = models.IntegerField(default=4)
    submitted_by = models.CharField(max_length=64)
    dedupe_key = models.CharField(max_length=512, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    next_retry_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    # Plain ids, not foreign keys: retention prunes parents and children independently.
    parent_job_id = models.CharField(max_length=36, null=True, blank=True)
    source_event_id = models.CharField(max_length=36, null=True, blank=True)
    event_context_id = models.CharField(max_length=36, null=True, blank=True)
    # Hops from the root job; a chain stops past 20 (or the pipeline's max_depth).
    route_depth = models.IntegerField(default=0)
    # The triggering event envelope delivered as the request's `event`.
    event = models.JSONField(null=True, blank=True)
    # Lease-based claims (ARCHITECTURE "Claims, leases and recovery").
    claimed_by = models.CharField(max_length=200, null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()
    # Not a column: set on a job `claim_next` returned (ClaimReads), None on any other instance.
    claim_reads: ClaimReads | None = None

    class Meta:
        db_table = "job_queue"
        ordering = ["-created_at"]
        # The operator's actions (ledger/roles.py: the `operator` group has them, `auditor` not).
        permissions = [
            ("replay_job", "Can replay a finished job"),
            ("cancel_job", "Can cancel a queued job"),
            ("retry_job", "Can retry a failed or dead job now"),
        ]
        indexes = [
            # Read by JobQuerySet.claim_next, named in its SQL (ledger.sql.claim): the FIFO scan over
            # waiting jobs.
            models.Index(fields=["created_at", "id"], name="job_queue_claim_idx", condition=Q(status="queued")),
            # Read by JobQuerySet._duplicate_of at every keyed enqueue, and by the claim's check that
            # no job of the same key is running (ledger.sql.claim).
            models.Index(
                fields=["dedupe_key", "plugin", "command", "status"],
                name="job_queue_dedupe_idx",
                condition=Q(dedupe_key__isnull=False),
            ),
            # Read by `job inspect` (children) and tree walks.
            models.Index(
                fields=["parent_job_id"], name="job_queue_parent_idx", condition=Q(parent_job_id__isnull=False)
            ),
            # Read by retention pruning (JobQuerySet.expired), the live views' latest failures and
            # throughput, and `system selfcheck`. Finished jobs only: a claim (completed_at stays
            # NULL) never touches it, and a completion adds one entry at its newest end. Readers
            # must say `completed_at IS NOT NULL` or compare completed_at, or SQLite cannot use it.
            models.Index(
                fields=["status", "completed_at"],
                name="job_queue_finished_idx",
                condition=Q(completed_at__isnull=False),
            ),
            # Read by the audit console's job list (gateway/console/admin/jobs.py), newest first: unfiltered
            # and by time; by status (and the index page's counts); by plugin and by submitter
            # (also their filters' choices, by loose index scan); by pipeline (the jobs of the
            # pipeline's event_context rows); and its error-text search, over failed jobs only.
            models.Index(fields=["created_at"], name="job_queue_created_idx"),
            # Also read, for its few `running` entries, by claim_next's per-plugin running counts,
            # recover_lost's probe and lost() (ledger.sql.RUNNING_COUNTS, ANY_RUNNING). A partial
            # index of running jobs for them was written at every claim and completion and read by
            # nothing on SQLite, whose planner chose this one (migration 0010).
            models.Index(fields=["status", "created_at"], name="job_queue_status_created_idx"),
            models.Index(fields=["plugin", "created_at"], name="job_queue_plugin_created_idx"),
            models.Index(fields=["submitted_by", "created_at"], name="job_queue_submitter_idx"),
            models.Index(
                fields=["event_context_id"], name="job_queue_context_idx", condition=Q(event_context_id__isnull=False)
            ),
            models.Index(fields=["created_at"], name="job_queue_error_idx", condition=Q(last_error__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.plugin}.{self.command} {self.id} ({self.status})"

    @property
    def submitter(self) -> Submitter | None:
        return Submitter.of(self.submitted_by)

    @property
    def is_terminal(self) -> bool:
        # A retried failure is re-queued in the same transaction, so a resting failed row is final.
        return self.status in TERMINAL

    # -- state changes: one method each, compare-and-set, then a transition row ---------------

    def move(
        self,
        to_status: str,
        reason: str,
        *,
        now: datetime,
        worker: str | None = None,
        where: Mapping[str, Any] | None = None,
        **changes: Any,
    ) -> None:
        """Compare-and-set this job from its current status to `to_status`. Call inside a transaction.
        `where` adds guards: a column's expected value, or `column__lt`."""
        check_transition(self.id, self.status, to_status)
        changes["status"] = to_status
        guard: dict[str, Any] = {"id": self.id, "status": self.status, **(where or {})}
        if worker is not None:
            guard["claimed_by"] = worker
        if sql.update(Job, changes, guard) != 1:
            raise LostJob(f"job {self.id} is no longer {self.status}" + (f" for {worker}" if worker else ""))
        from_status = self.status
        for name, value in changes.items():
            setattr(self, name, value)
        JobTransition.record(self, from_status, to_status, reason, now=now, worker=worker or self.claimed_by)

    def record_outcome(
        self,
        outcome: AttemptOutcome,
        *,
        worker: str,
        default_dedupe_ttl: float,
        now: datetime | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """Completion in one transaction: status, log, stopwatch, facts and routed children."""
        now = now or timezone.now()
        with writing(savepoint=False):
            # Successors first, so "the tree is complete" is exact the moment this job is terminal.
            for child in outcome.children:
                Job.objects.enqueue(child, default_dedupe_ttl=default_dedupe_ttl, now=now)
            self.move(
                outcome.status,
                outcome.error or "plugin returned ok",
                now=now,
                worker=worker,
                completed_at=now,
                last_error=outcome.error,
                lease_until=None,
            )
            JobLog.record(self, outcome, now=now, worker=worker)
            if outcome.stopwatch is not None:
                row = {"job_id": self.id, "plugin": self.plugin, "attempt": self.attempt, "step_name": None}
                sql.insert(JobStopwatch, {**row, "created_at": now, **outcome.stopwatch})
            if outcome.state_write is not None:
                write_state(*outcome.state_write, job_id=self.id, command=self.command, now=now)
            if outcome.events:
                EventRecord.record(outcome.events, job_id=self.id, now=now)
            if outcome.breaker_threshold is not None:
                record_scheduled_outcome(
                    self.plugin,
                    self.command,
                    self.id,
                    succeeded=outcome.status == JobStatus.SUCCEEDED,
                    threshold=outcome.breaker_threshold,
                    now=now,
                )
            final = outcome.final_status(self.attempt, self.max_attempts)
            if final == JobStatus.DEAD:
                self.move(JobStatus.DEAD, f"max attempts ({self.max_attempts}) exhausted", now=now)
            elif final is None:
                self._retry(outcome.backoff_base, now=now, rng=rng, at=outcome.retry_at)
            if self.command in ("init", "health") and final is not None:
                # In the completion's transaction: a plugin's health is never behind its answer.
                error = None if final == JobStatus.SUCCEEDED else outcome.error
                if self.command == "health":
                    PluginInstanceRecord.objects.health_answered(self.plugin, error=error, now=now)
                elif self.submitter is Submitter.SYSTEM:
                    PluginInstanceRecord.objects.init_finished(self.plugin, error=error, now=now)
            if self.is_terminal:
                notify_finished()

    # -- an operator's actions: `job cancel|retry|replay` and the console's buttons -------------

    @property
    def can_cancel(self) -> bool:
        return self.status == JobStatus.QUEUED

    @property
    def can_retry(self) -> bool:
        return self.status in RETRYABLE_BY_HAND

    @property
    def can_replay(self) -> bool:
        return self.is_terminal

    def cancel(self, *, by: str, now: datetime | None = None) -> None:
        """A queued job that must not run: `dead`, "cancelled by <who>". LostJob when a worker
        claimed it in the meantime (it is running now and is left alone)."""
        if not self.can_cancel:
            raise ActionRefused(f"job {self.id} is {self.status}; only a queued job can be cancelled")
        self._bury(f"cancelled by {by}", now=now or timezone.now())

    def retry_now(self, *, by: str, now: datetime | None = None) -> None:
        """A failed, timed-out or dead job gets one more attempt, due at once: "retried by <who>".
        A job that had used all its attempts is given exactly one more (max_attempts grows to
        fit), so a failure ends it `dead` again instead of starting another backoff series."""
        if not self.can_retry:
            raise ActionRefused(f"job {self.id} is {self.status}; only a failed, timed_out or dead job can be retried")
        now = now or timezone.now()
        attempt = self.attempt + 1
        limit = max(self.max_attempts, attempt)
        with writing():
            self.move(
                JobStatus.QUEUED,
                f"retried by {by}: attempt {attempt}/{limit}",
                now=now,
                attempt=attempt,
                max_attempts=limit,
                next_retry_at=None,
                completed_at=None,
                claimed_by=None,
                lease_until=None,
            )
            notify_enqueued()

    def check_replayable(self) -> None:
        """A replay (gateway.intake.replay) is of a finished job only."""
        if not self.can_replay:
            raise ActionRefused(f"job {self.id} is still {self.status}; only a finished job can be replayed")

    def _bury(self, reason: str, *, now: datetime) -> None:
        """queued -> dead with `reason`, never run."""
        with writing():
            self.move(JobStatus.DEAD, reason, now=now, completed_at=now, last_error=reason)
            notify_finished()

    def _retry(
        self, backoff_base: float, *, now: datetime, rng: random.Random | None, at: datetime | None = None
    ) -> None:
        if at is None:
            at = now + timedelta(seconds=backoff_seconds(self.attempt, backoff_base, rng))
        self.move(
            JobStatus.QUEUED,
            f"retry {self.attempt + 1}/{self.max_attempts} in {(at - now).total_seconds():.1f}s",
            now=now,
            attempt=self.attempt + 1,
            next_retry_at=at,
            completed_at=None,
            claimed_by=None,
        )

    def abandon(
        self,
        reason: str,
        *,
        now: datetime,
        dead_owner: bool,
        ending: Ending | None = None,
        default_dedupe_ttl: float = 0.0,
    ) -> None:
        """A lost job (its worker died): this attempt failed, the next one is queued at once, or the
        job ends `dead` by the same rule as any failed attempt (`AttemptOutcome.final_status`)."""
        owner = self.claimed_by
        outcome = AttemptOutcome(status=JobStatus.FAILED, error=reason)
        final = outcome.final_status(self.attempt, self.max_attempts)
        if final is not None and ending is not None:
            ending(self, outcome)
        for child in outcome.children:
            Job.objects.enqueue(child, default_dedupe_ttl=default_dedupe_ttl, now=now)
        # Why the lease guard: the owner may have heartbeated since we read the row; then it lives.
        where = {} if dead_owner else {"lease_until__lt": now}
        self.move(
            JobStatus.FAILED,
            reason,
            now=now,
            worker=owner,
            where=where,
            completed_at=now,
            last_error=reason,
            lease_until=None,
        )
        JobLog.record(self, outcome, now=now, worker=owner)
        if outcome.events:
            EventRecord.record(outcome.events, job_id=self.id, now=now)
        if final is not None:
            self.move(final, f"{reason}; max attempts ({self.max_attempts}) exhausted", now=now)
            notify_finished()
        else:
            self.move(
                JobStatus.QUEUED,
                f"recovered: attempt {self.attempt + 1}/{self.max_attempts}",
                now=now,
                attempt=self.attempt + 1,
                completed_at=None,
                claimed_by=None,
                next_retry_at=None,
            )


class JobTransitionQuerySet(PrunableQuerySet["JobTransition"]):
    def expired(self, before: datetime) -> JobTransitionQuerySet:
        """Recorded before `before` (now minus `job_log_retention`: a job's history lives as long
        as its job_log attempts, not as briefly as its job_queue row), and not of a job still
        queued or running, whose history is kept whole. A scan in id order, no index on
        `created_at` (ledger.models.retention)."""
        live = Job.objects.filter(status__in=(JobStatus.QUEUED, JobStatus.RUNNING)).values("id")
        return self.filter(created_at__lt=before).exclude(job_id__in=live)


class JobTransition(models.Model):
    """Append-only: every status change of every job, with why and by whom."""

    job_id = models.CharField(max_length=36)
    from_status = models.CharField(max_length=16, null=True, blank=True)
    to_status = models.CharField(max_length=16)
    reason = models.TextField(blank=True, default="")
    worker = models.CharField(max_length=200, null=True, blank=True)
    attempt = models.IntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)

    objects = JobTransitionQuerySet.as_manager()

    class Meta:
        db_table = "job_transitions"
        ordering = ["id"]
        indexes = [
            models.Index(fields=["job_id", "id"], name="job_transitions_job_idx"),  # read by job inspect
        ]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_status} -> {self.to_status}"

    @classmethod
    def record(
        cls, job: Job, from_status: str | None, to_status: str, reason: str, *, now: datetime, worker: str | None = None
    ) -> None:
        sql.insert(cls, cls.row(job, from_status, to_status, reason, now=now, worker=worker))

    @staticmethod
    def row(
        job: Job, from_status: str | None, to_status: str, reason: str, *, now: datetime, worker: str | None = None
    ) -> dict[str, Any]:
        return {
            "job_id": job.id,
            "from_status": from_status,
            "to_status": to_status,
            "reason": reason[:4000],
            "worker": worker,
            "attempt": job.attempt,
            "created_at": now,
        }


class JobLogQuerySet(PrunableQuerySet["JobLog"]):
    def expired(self, before: datetime) -> JobLogQuerySet:
        """Attempts that finished before `before` (now minus `job_log_retention`, spec §11.5)."""
        return self.filter(completed_at__lt=before)


class JobLog(models.Model):
    """One row per finished attempt: the plugin's response verbatim, its stderr, the error."""

    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    job_id = models.CharField(max_length=36)
    plugin = models.CharField(max_length=200)
    command = models.CharField(max_length=200)
    status = models.CharField(max_length=16)
    result = models.TextField(null=True, blank=True)
    attempt = models.IntegerField()
    submitted_by = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField()
    last_error = models.TextField(null=True, blank=True)
    stderr = models.TextField(null=True, blank=True)
    parent_job_id = models.CharField(max_length=36, null=True, blank=True)
    source_event_id = models.CharField(max_length=36, null=True, blank=True)

    objects = JobLogQuerySet.as_manager()

    class Meta:
        db_table = "job_log"
        ordering = ["-completed_at"]
        indexes = [
            models.Index(fields=["job_id"], name="job_log_job_idx"),  # read by job inspect, GET /job
            models.Index(fields=["completed_at"], name="job_log_completed_idx"),  # retention, job logs --from
            models.Index(fields=["plugin", "completed_at"], name="job_log_plugin_idx"),  # job logs --plugin
            # Read by `job logs --status S [--plugin P]` and GET /job-logs for a status other than
            # succeeded (gateway.reports.find_logs): their page and their `total`, which without it
            # counted every row of the plugin, or of the table, one heap read each (5-13 s on a
            # PostgreSQL ledger of 10 M jobs, bench_ledger_scale.py). Partial, so a succeeded
            # attempt, most of them, writes no entry; the reader says `status <> succeeded`, or
            # SQLite cannot use it.
            models.Index(
                fields=["status", "plugin", "completed_at"],
                name="job_log_problem_idx",
                condition=~Q(status="succeeded"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.plugin}.{self.command} {self.job_id} #{self.attempt} {self.status}"

    @classmethod
    def record(cls, job: Job, outcome: AttemptOutcome, *, now: datetime, worker: str | None = None) -> None:
        """The attempt's log row and its `job_attempts` fact, in the caller's transaction."""
        JobAttempt.record(
            job_id=job.id,
            attempt=job.attempt,
            status=outcome.status,
            worker=worker,
            started_at=job.started_at,
            error=outcome.error,
            now=now,
            sandbox=outcome.sandbox,
        )
        if outcome.egress:
            EgressHost.record(job_id=job.id, attempt=job.attempt, plugin=job.plugin, hosts=outcome.egress, now=now)
        sql.insert(
            cls,
            {
                "id": new_id(),
                "job_id": job.id,
                "plugin": job.plugin,
                "command": job.command,
                "status": outcome.status,
                "result": outcome.response_text,
                "attempt": job.attempt,
                "submitted_by": job.submitted_by,
                "created_at": job.created_at,
                "completed_at": now,
                "last_error": outcome.error,
                "stderr": outcome.stderr or None,
                "parent_job_id": job.parent_job_id,
                "source_event_id": job.source_event_id,
            },
        )
