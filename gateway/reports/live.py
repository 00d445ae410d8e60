"""The live figures: one snapshot of what the gateway is doing, built from the ledger with cheap
indexed queries, for every live view (ARCHITECTURE "Human surfaces"): the web dashboard's stream,
`ductile system watch` (spec 000 "Monitoring & Observability", Real-Time Dashboard (TUI)) and
`GET /system/watch`, which the watch view reads over the API.

What each part reads, and why it stays cheap on a busy ledger:
- queue counts and live workers: `reports.queue_status`, as `system status` shows them;
- nodes and the plugins no live node serves: `reports.nodes`, over the small `worker_instances`
  table, and the queued jobs only when some plugin is left out of every live node's group;
- running jobs: the partial index on running rows;
- throughput and failure rate per minute over the last hour: jobs that reached a terminal status,
  counted per minute by the database over the (status, completed_at) index;
- latency p50/p95/p99 per plugin: each plugin's newest stopwatch records of the hour, over the
  (plugin, created_at) index, nearest-rank as `GET /stopwatch/{plugin}`;
- breakers and schedules: small tables, read whole;
- latest failures: the newest rows of each failed status, over the (status, completed_at) index;
- pipelines' latest runs: `gateway.reports.runs.RECENT_RUNS`, which reads only what was appended since;
- recent events: the newest `event_log` rows by id.

`change_marker()` is one statement of a few index look-ups: the live views poll it and rebuild the
snapshot only when it moves (or every REFRESH_SECONDS for what changes with time alone).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import CharField, Count
from django.db.models.functions import Cast, Substr
from django.utils import timezone

from gateway.reports import queue_status, ts
from gateway.reports import runs as run_index
from gateway.reports.events import row_data
from gateway.reports.nodes import node_list, unserved_plugins
from gateway.reports.percentiles import summary
from gateway.runtime import Runtime
from gateway.storage.database import describe_database
from gateway.version import gateway_version
from ledger import sql
from ledger.models import (
    CircuitBreaker,
    EventRecord,
    Job,
    JobStopwatch,
    ScheduleEntry,
)
from ledger.models.schedules import ScheduleStatus
from ledger.states import TERMINAL, JobStatus

WINDOW_MINUTES = 60
LATENCY_SAMPLE = 500  # newest stopwatch records per plugin within the window
LIST_LIMIT = 10  # failures, next runs, recent events shown
RUNNING_LIMIT = 50
FAILED_STATUSES = (JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.DEAD)
# Rebuild at least this often with no ledger change: the hour's window slides, heartbeats age.
REFRESH_SECONDS = 10.0


def build_snapshot(runtime: Runtime, now: datetime | None = None) -> dict[str, Any]:
    """The figures, scrubbed of the config's secrets as a whole (the latest failures are a plugin's
    words; an auditor's dashboard and `system watch` show them): once per snapshot, however many
    views read it."""
    now = now or timezone.now()
    service = runtime.config.service
    queue = queue_status(now, lease_ttl=service.lease_ttl)
    running = list(Job.objects.running().order_by("started_at", "id")[:RUNNING_LIMIT])
    recent_runs = run_index.RECENT_RUNS.latest()
    snapshot = {
        "generated_at": ts(now),
        "gateway": {
            "name": service.name,
            "version": gateway_version(),
            "config_dir": str(runtime.config.config_dir),
            "database": describe_database(),
            "plugins_loaded": len(runtime.registry.instances),
            "pipelines": len(runtime.pipelines.pipelines),
        },
        **queue,
        "nodes": node_list(now, service.lease_ttl),
        "unserved": unserved_plugins(now, service.lease_ttl),
        "running": [
            {
                "job_id": job.id,
                "plugin": job.plugin,
                "command": job.command,
                "attempt": job.attempt,
                "max_attempts": job.max_attempts,
                "claimed_by": job.claimed_by,
                "started_at": ts(job.started_at),
                "elapsed_seconds": round((now - job.started_at).total_seconds(), 3) if job.started_at else None,
            }
            for job in running
        ],
        "throughput": throughput(now),
        "latency": latency(runtime, now),
        "breakers": [
            {
                "plugin": b.plugin,
                "command": b.command,
                "state": b.state,
                "failure_count": b.failure_count,
                "opened_at": ts(b.opened_at),
                "last_failure_at": ts(b.last_failure_at),
                "last_job_id": b.last_job_id,
            }
            for b in CircuitBreaker.objects.order_by("plugin", "command")
        ],
        "schedules": next_runs(),
        "failures": latest_failures(),
        "pipelines": [
            {
                "name": name,
                "trigger": pipeline.trigger,
                "steps": len(pipeline.nodes),
                "last_run": runs[0].as_dict() if (runs := recent_runs.get(name)) else None,
            }
            for name, pipeline in sorted(runtime.pipelines.pipelines.items())
        ],
        "recent_events": [event_summary(row) for row in EventRecord.objects.order_by("-id")[:LIST_LIMIT]],
    }
    return runtime.scrubber.json(snapshot)


def event_summary(row: EventRecord) -> dict[str, Any]:
    """An `event_log` row as the live views list it: the payload stays in the audit console."""
    return {k: v for k, v in row_data(row).items() if k != "payload"}


def window_start(now: datetime) -> datetime:
    """The first minute of the window: the window's last bucket is the minute `now` is in."""
    return now.replace(second=0, microsecond=0) - timedelta(minutes=WINDOW_MINUTES - 1)


def _minute_key(value: str) -> datetime:
    # SQLite stores "2026-11-24 19:40:01.123"; PostgreSQL's text of a timestamptz in UTC is alike.
    return datetime.strptime(value.replace("T", " ")[:16], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


def throughput(now: datetime) -> dict[str, Any]:
    """Jobs that ended per minute over the last hour, and how many of them failed (failed, timed
    out or dead: a retried attempt is not an end). Counted by the database, grouped on the minute
    part of `completed_at`'s text, which both backends keep in UTC."""
    start = window_start(now)
    minute = Substr(Cast("completed_at", CharField()), 1, 16)
    rows = (
        Job.objects.filter(status__in=TERMINAL, completed_at__gte=start)
        .annotate(minute=minute)
        .values_list("minute", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    finished = [0] * WINDOW_MINUTES
    failed = [0] * WINDOW_MINUTES
    for key, status, n in rows:
        index = int((_minute_key(key) - start).total_seconds() // 60)
        if 0 <= index < WINDOW_MINUTES:
            finished[index] += n
            if status != JobStatus.SUCCEEDED:
                failed[index] += n
    total, total_failed = sum(finished), sum(failed)
    return {
        "bucket_seconds": 60,
        "start": ts(start),
        "finished": finished,
        "failed": failed,
        "finished_last_hour": total,
        "failed_last_hour": total_failed,
        "jobs_per_minute": round(total / WINDOW_MINUTES, 2),
        "failure_rate": round(total_failed / total, 4) if total else None,
    }


def latency(runtime: Runtime, now: datetime) -> dict[str, Any]:
    """Per plugin with records in the window: p50/p95/p99 and max of the plugin's own time
    (`dur_ns`, spec "Stopwatch"), over its newest LATENCY_SAMPLE invocations of the hour."""
    since = now - timedelta(minutes=WINDOW_MINUTES)
    plugins = []
    for name in sorted(runtime.registry.instances):
        sample = list(
            JobStopwatch.objects.filter(plugin=name, created_at__gte=since)
            .order_by("-created_at")
            .values_list("dur_ns", flat=True)[:LATENCY_SAMPLE]
        )
        if sample:
            plugins.append({"plugin": name, "count": len(sample), "plugin_time_ns": summary(sample)})
    return {
        "window_seconds": WINDOW_MINUTES * 60,
        "sample_limit": LATENCY_SAMPLE,
        "percentile_method": "nearest-rank",
        "plugins": plugins,
    }


def next_runs() -> list[dict[str, Any]]:
    rows = ScheduleEntry.objects.filter(status=ScheduleStatus.ACTIVE, next_run_at__isnull=False)
    return [
        {
            "plugin": row.plugin,
            "schedule_id": row.schedule_id,
            "command": row.command,
            "next_run_at": ts(row.next_run_at),
            "last_fired_at": ts(row.last_fired_at),
            "last_job_id": row.last_job_id,
        }
        for row in rows.order_by("next_run_at")[:LIST_LIMIT]
    ]


def latest_failures() -> list[dict[str, Any]]:
    """One short query per failed status (each an index walk from its newest end), merged: a single
    `status IN (...)` ordered by time would sort every failed row the queue holds. The
    `completed_at` condition (true of every finished job) lets SQLite use the partial index of
    finished jobs (ledger `job_queue_finished_idx`)."""
    jobs = [
        job
        for status in FAILED_STATUSES
        for job in Job.objects.filter(status=status, completed_at__isnull=False).order_by("-completed_at")[:LIST_LIMIT]
    ]
    jobs.sort(key=lambda job: (job.completed_at or job.created_at, job.id), reverse=True)
    return [
        {
            "job_id": job.id,
            "plugin": job.plugin,
            "command": job.command,
            "status": job.status,
            "attempt": job.attempt,
            "completed_at": ts(job.completed_at),
            "last_error": (job.last_error or "")[:500],
        }
        for job in jobs[:LIST_LIMIT]
    ]


def change_marker() -> tuple[Any, ...]:
    """Moves whenever the figures may have: a job changed status, an event was recorded, a breaker
    or schedule entry changed, a worker started or stopped (ledger.sql.CHANGE_MARKER)."""
    with connection.cursor() as cursor:
        cursor.execute(sql.CHANGE_MARKER)
        row = cursor.fetchone()
    return tuple(row)


class LedgerClock:
    """A generation number that moves when the ledger did (`change_marker`), or every `refresh`
    seconds regardless; the marker is read at most every `min_interval`, however many views of
    this process ask or however fast the ledger moves."""

    def __init__(self, min_interval: float = 0.5, refresh: float = REFRESH_SECONDS):
        self.min_interval, self.refresh = min_interval, refresh
        self.generation = 0
        self._lock = threading.Lock()
        self._marker: tuple[Any, ...] | None = None
        self._checked = self._moved = float("-inf")

    def tick(self) -> int:
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= self.min_interval:
                self._checked = now
                marker = change_marker()
                if marker != self._marker or now - self._moved >= self.refresh:
                    self._marker, self._moved = marker, now
                    self.generation += 1
            return self.generation


class LiveFigures:
    """The snapshot of this process's latest clock generation, built once and shared by every view."""

    def __init__(self, clock: LedgerClock):
        self.clock = clock
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] | None = None
        self._generation = -1

    def get(self, runtime: Runtime) -> dict[str, Any]:
        generation = self.clock.tick()
        with self._lock:
            if self._snapshot is None or generation != self._generation:
                self._snapshot = build_snapshot(runtime)
                self._generation = generation
            return self._snapshot


CLOCK = LedgerClock()
LIVE_FIGURES = LiveFigures(CLOCK)
