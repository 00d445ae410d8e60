"""Pipeline runs as the live views show them: each pipeline's latest runs with their status, and one
run's steps with the status of each step's job (`/dashboard/pipelines/`, `system watch`).

A run is a root job whose `event_context` row has no parent and names a pipeline, plus the tree of
jobs under it. Runs are found without scanning the ledger on every look: `RecentRuns` finds each
pipeline's latest ones once per process (one scan of `job_queue`, which retention keeps short),
then only reads the `job_transitions` rows appended since (their id is the cursor, with the gap
tracking of the `/events` stream for PostgreSQL's commit order). A run's status is read from its
tree only while it can still change: once every job in it is terminal it is final (successors are
enqueued in the transaction that ends their parent, so "all terminal" is exact).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, Max, OuterRef, Subquery, Window
from django.db.models.functions import RowNumber

from gateway.reports import ts
from gateway.reports.events import BATCH, EventCursor
from ledger.models import EventContext, Job, JobTransition
from ledger.states import TERMINAL, JobStatus

KEEP = 20  # runs kept per pipeline: what the run chooser offers
FAILED = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.DEAD})


@dataclass
class Run:
    job_id: str  # the root job
    pipeline: str
    started_at: datetime
    status: str = JobStatus.QUEUED  # queued | running | succeeded | failed
    finished_at: datetime | None = None
    final: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "pipeline": self.pipeline,
            "status": self.status,
            "started_at": ts(self.started_at),
            "finished_at": ts(self.finished_at),
        }


def tree_status(jobs: Iterable[Mapping[str, Any]]) -> tuple[str, datetime | None, bool]:
    """(status, finished_at, final) of a run from its jobs' `status` and `completed_at`: failed as
    soon as any job rests failed, timed out or dead (even while others still run)."""
    statuses = [job["status"] for job in jobs]
    if not statuses:
        return JobStatus.QUEUED, None, False
    final = all(status in TERMINAL for status in statuses)
    finished = max((job["completed_at"] for job in jobs if job["completed_at"]), default=None) if final else None
    if any(status in FAILED for status in statuses):
        return "failed", finished, final
    if final:
        return JobStatus.SUCCEEDED, finished, True
    started = any(status != JobStatus.QUEUED for status in statuses)
    return (JobStatus.RUNNING if started else JobStatus.QUEUED), None, False


def trees(root_ids: Iterable[str], fields: tuple[str, ...] = ("status", "completed_at")) -> dict[str, list[dict]]:
    """Every job under each root (the root included), one query per level for all roots at once."""
    columns = ("id", "parent_job_id", *fields)
    by_root: dict[str, list[dict]] = {}
    owner: dict[str, str] = {}
    level = list(Job.objects.filter(pk__in=list(root_ids)).values(*columns))
    for job in level:
        owner[job["id"]] = job["id"]
    while level:
        for job in level:
            by_root.setdefault(owner[job["id"]], []).append(job)
        frontier = [job["id"] for job in level]
        level = [
            job
            for job in Job.objects.filter(parent_job_id__in=frontier).values(*columns)
            if job["id"] not in owner  # a hook root also hangs under the job that fired it
        ]
        for job in level:
            owner[job["id"]] = owner[job["parent_job_id"]]
    return by_root


def _root_pipeline() -> Subquery:
    """The pipeline a job starts, when its context is a root context (no parent) naming one."""
    roots = EventContext.objects.filter(pk=OuterRef("event_context_id"), parent_id__isnull=True)
    return Subquery(roots.values("pipeline_name")[:1])


class RecentRuns:
    """Each pipeline's latest KEEP runs, newest first, kept current per process (see the module)."""

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self._lock = threading.Lock()
        self._cursor: EventCursor | None = None
        self._runs: dict[str, list[Run]] = {}

    def latest(self) -> dict[str, list[Run]]:
        """Refreshed: what was appended since the last look, and the status of unfinished runs."""
        with self._lock:
            if self._cursor is None:
                self._start()
            else:
                self._follow()
            return {name: list(runs) for name, runs in self._runs.items()}

    def _start(self) -> None:
        # The cursor first: a run started during the scan is then found twice, never missed.
        last = JobTransition.objects.aggregate(last=Max("id"))["last"] or 0
        self._cursor = EventCursor(last)
        ranked = (
            Job.objects.exclude(event_context_id=None)
            .annotate(pipeline=_root_pipeline())
            .filter(pipeline__isnull=False)
            .annotate(rank=Window(RowNumber(), partition_by=F("pipeline"), order_by=F("created_at").desc()))
            .filter(rank__lte=self.keep)
            .values_list("id", "pipeline", "created_at")
        )
        self._add(ranked)
        self._update_statuses()

    def _follow(self) -> None:
        assert self._cursor is not None
        new_jobs: list[str] = []
        changed = False
        while True:
            rows = list(
                JobTransition.objects.filter(self._cursor.pending(time.monotonic()))
                .order_by("id")
                .values_list("id", "job_id", "from_status")[:BATCH]
            )
            self._cursor.advance([row[0] for row in rows], time.monotonic())
            changed = changed or bool(rows)
            new_jobs += [job_id for _, job_id, from_status in rows if from_status is None]
            if len(rows) < BATCH:
                break
        if new_jobs:
            found = (
                Job.objects.filter(pk__in=new_jobs)
                .exclude(event_context_id=None)
                .annotate(pipeline=_root_pipeline())
                .filter(pipeline__isnull=False)
                .values_list("id", "pipeline", "created_at")
            )
            self._add(found)
        if changed:
            self._update_statuses()

    def _add(self, rows: Iterable[tuple[str, str, datetime]]) -> None:
        for job_id, pipeline, created_at in rows:
            runs = self._runs.setdefault(pipeline, [])
            if any(run.job_id == job_id for run in runs):
                continue
            runs.append(Run(job_id, pipeline, created_at))
        for name, runs in self._runs.items():
            runs.sort(key=lambda run: (run.started_at, run.job_id), reverse=True)
            del runs[self.keep :]
            self._runs[name] = runs

    def _update_statuses(self) -> None:
        open_runs = {run.job_id: run for runs in self._runs.values() for run in runs if not run.final}
        if not open_runs:
            return
        found = trees(open_runs)
        for job_id, run in open_runs.items():
            run.status, run.finished_at, run.final = tree_status(found.get(job_id, []))


RECENT_RUNS = RecentRuns()


def run_steps(job_id: str) -> dict[str, Any] | None:
    """One run: its pipeline, status, and per step (node id) the latest job of the run at that
    step of that pipeline. None when the job is not (or no longer) the root of a pipeline run."""
    root = (
        Job.objects.filter(pk=job_id)
        .exclude(event_context_id=None)
        .annotate(pipeline=_root_pipeline())
        .values("id", "pipeline", "created_at")
        .first()
    )
    if root is None or root["pipeline"] is None:
        return None
    fields = ("status", "completed_at", "plugin", "command", "attempt", "created_at", "event_context_id")
    jobs = trees([job_id], fields).get(job_id, [])
    contexts = dict(
        EventContext.objects.filter(pk__in=[j["event_context_id"] for j in jobs if j["event_context_id"]])
        .filter(pipeline_name=root["pipeline"])
        .values_list("id", "step_id")
    )
    steps: dict[str, dict[str, Any]] = {}
    for job in sorted(jobs, key=lambda j: j["created_at"]):
        step = contexts.get(job["event_context_id"])
        if step is None:
            continue  # a hop of another pipeline (a hook it fired) or outside any pipeline
        steps[step] = {
            "job_id": job["id"],
            "status": job["status"],
            "attempt": job["attempt"],
            "plugin": job["plugin"],
            "command": job["command"],
            "runs": steps.get(step, {}).get("runs", 0) + 1,
        }
    status, finished, _ = tree_status(jobs)
    return {
        "job_id": job_id,
        "pipeline": root["pipeline"],
        "status": status,
        "started_at": ts(root["created_at"]),
        "finished_at": ts(finished),
        "steps": steps,
    }
