"""Read models for the CLI and the API: jobs, attempts, trees and queue status as plain dicts.

What a plugin or an agent wrote (errors, stderr, results, payloads, baggage) leaves here scrubbed
of the loaded config's secrets (gateway/config/redaction.py), and of those the job itself carried
under secret-like keys where the job is at hand: every surface built on these reads shows
`[REDACTED]` where the console does."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Count, Q, TextField
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from gateway.config.durations import format_duration
from gateway.config.errors import ConfigError
from gateway.config.integrity import SealUnusable, file_digest, read_seal, tier_of
from gateway.config.loader import config_files
from gateway.config.redaction import REDACTED, Scrubber
from gateway.config.schedules import Schedule
from gateway.reports.nodes import unserved_plugins
from gateway.runtime import RUNTIME, Runtime
from gateway.scheduler.timing import first_due
from ledger.models import (
    CircuitBreaker,
    CircuitBreakerTransition,
    EgressHost,
    EventContext,
    Job,
    JobAttempt,
    JobLog,
    JobStopwatch,
    JobTransition,
    ScheduleEntry,
    WorkerInstance,
)
from ledger.states import STATUS_ALIASES, JobStatus
from ledger.timestamps import rfc3339
from pipelines.successors import CONTROL


def ts(value: datetime | None) -> str | None:
    """A field's time (ledger.timestamps.rfc3339), or None for a time not reached."""
    return rfc3339(value) if value else None


def parse_rfc3339(raw: str) -> datetime:
    """A filter's timestamp, in UTC. ValueError says what is wrong (the caller names the filter)."""
    parsed = parse_datetime(raw.replace("Z", "+00:00")) if raw else None
    if parsed is None or parsed.tzinfo is None:
        raise ValueError(f"must be an RFC 3339 timestamp such as 2026-11-21T10:00:00Z, got {raw!r}")
    try:
        # In UTC: PostgreSQL refuses offsets past ±15:59, which Python accepts up to ±23:59.
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"is out of range in UTC, got {raw!r}") from None


def parse_response(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # a refused response is kept as it came, however deep
        return text


def normalise_status(value: str) -> str:
    status = STATUS_ALIASES.get(value, value)
    if status not in JobStatus.values:
        raise ValueError(f"unknown status {value!r}; use one of {', '.join(JobStatus.values)} or pending, ok, error")
    return str(status)


def job_summary(job: Job) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "plugin": job.plugin,
        "command": job.command,
        "status": job.status,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "submitted_by": job.submitted_by,
        "dedupe_key": job.dedupe_key,
        "parent_job_id": job.parent_job_id,
        "created_at": ts(job.created_at),
        "started_at": ts(job.started_at),
        "completed_at": ts(job.completed_at),
        "next_retry_at": ts(job.next_retry_at),
        "last_error": job.last_error,
    }


def latest_result(job: Job) -> Any:
    text = JobLog.objects.filter(job_id=job.id).order_by("-completed_at").values_list("result", flat=True).first()
    return parse_response(text)


def hiding(*carried: Any) -> Scrubber:
    """What a read hides: the loaded config's secrets, and what `carried` (a job's payload,
    event, baggage) holds under secret-like keys."""
    return RUNTIME.scrubber().knowing(*carried)


_UNREAD = object()


def job_read(job: Job, result: Any = _UNREAD) -> dict[str, Any]:
    """A job and its latest result (read here unless given): `GET /job/{id}`, each hop of
    `GET /job/{id}/tree` and of a synchronous pipeline's answer."""
    found = latest_result(job) if result is _UNREAD else result
    return hiding(job.payload, job.event).json({**job_summary(job), "result": found})


def log_entry(row: JobLog, *, include_result: bool = True) -> dict[str, Any]:
    entry = {
        "log_id": row.id,
        "job_id": row.job_id,
        "plugin": row.plugin,
        "command": row.command,
        "status": row.status,
        "attempt": row.attempt,
        "submitted_by": row.submitted_by,
        "created_at": ts(row.created_at),
        "completed_at": ts(row.completed_at),
        "last_error": row.last_error,
        "stderr": row.stderr,
        "parent_job_id": row.parent_job_id,
        "source_event_id": row.source_event_id,
    }
    if include_result:
        entry["result"] = parse_response(row.result)
    return entry


MAX_LOGS = 200
LOG_TEXTS = ("last_error", "stderr", "result")  # job_log's columns of what a plugin wrote: what `query` searches


def _holding(query: str, columns: Iterable[str]) -> Q:
    found = Q()
    for column in columns:
        found |= Q(**{f"{column}__icontains": query})
    return found


def _shown_column(column: str, scrubber: Scrubber) -> RawSQL:
    """A text column as it is shown, in SQL: each secret replaced, the longest first, as it came
    and as JSON escapes it (the stored response is JSON text). One raw expression of nested
    REPLACE calls (both backends have it): as as many Django expressions, compiling the query
    cost 5 ms for a config's eight secrets."""
    forms = sorted(
        {
            form
            for secret in scrubber.secrets
            for form in (secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1])
        },
        key=len,
        reverse=True,
    )
    sql = connection.ops.quote_name(column)
    for _ in forms:
        sql = f"REPLACE({sql}, %s, %s)"
    return RawSQL(sql, [part for form in forms for part in (form, REDACTED)], output_field=TextField())


def find_logs(
    filters: dict[str, str | None],
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    limit: int = 50,
    include_result: bool = False,
) -> tuple[list[dict[str, Any]], int]:
    """`job logs` and `GET /job-logs`: finished attempts, newest first. ValueError names a bad filter."""
    if not 1 <= limit <= MAX_LOGS:
        raise ValueError(f"limit must be between 1 and {MAX_LOGS}")
    rows = JobLog.objects.all()
    for name in ("job_id", "plugin", "command", "submitted_by"):
        if filters.get(name):
            rows = rows.filter(**{name: filters[name]})
    if filters.get("status"):
        status = normalise_status(str(filters["status"]))
        rows = rows.filter(status=status)
        if status != JobStatus.SUCCEEDED:
            # Implied already; said so that SQLite reads the partial index of problem attempts
            # (job_log_problem_idx), whose condition a query must state to use it.
            rows = rows.exclude(status=JobStatus.SUCCEEDED)
    if start is not None:
        rows = rows.filter(completed_at__gte=start)
    if end is not None:
        rows = rows.filter(completed_at__lte=end)
    scrubber = RUNTIME.scrubber()
    if query := filters.get("query"):
        rows = rows.filter(_holding(query, LOG_TEXTS))
        if scrubber.secrets:
            # What a search finds is what it shows: matched again, in the rows the plain match
            # found, with the secrets replaced. Else what it finds would tell an auditor, a
            # character at a time, what a secret is.
            shown = {f"{column}_shown": _shown_column(column, scrubber) for column in LOG_TEXTS}
            rows = rows.alias(**shown).filter(_holding(query, shown))
    page = list(rows.order_by("-completed_at")[:limit])
    entries = [log_entry(row, include_result=include_result) for row in page]
    for row, entry in zip(page, entries, strict=True):
        # Only what the plugin wrote, each as what it is: the texts searched as they are, the
        # response as it was stored, before it is walked (a page of logs is read often).
        entry["last_error"], entry["stderr"] = scrubber.text(entry["last_error"]), scrubber.text(entry["stderr"])
        if include_result and scrubber.may_be_in(row.result or ""):
            entry["result"] = scrubber.json(entry["result"])
    return entries, rows.count()


def job_detail(job: Job) -> dict[str, Any]:
    """`job inspect`: the job, every transition and attempt, its timing, context, parent and children."""
    parent = Job.objects.filter(pk=job.parent_job_id).first() if job.parent_job_id else None
    context = EventContext.objects.filter(pk=job.event_context_id).first() if job.event_context_id else None
    baggage = context.accumulated_json if context else None
    return hiding(job.payload, job.event, baggage).json(
        {
            **job_summary(job),
            "payload": job.payload,
            "event": job.event,
            "source_event_id": job.source_event_id,
            "claimed_by": job.claimed_by,
            "lease_until": ts(job.lease_until),
            "result": latest_result(job),
            "transitions": [
                {
                    "from": t.from_status,
                    "to": t.to_status,
                    "reason": t.reason,
                    "worker": t.worker,
                    "attempt": t.attempt,
                    "at": ts(t.created_at),
                }
                for t in JobTransition.objects.filter(job_id=job.id).order_by("id")
            ],
            "attempts": [log_entry(row) for row in JobLog.objects.filter(job_id=job.id).order_by("completed_at")],
            # job_attempts: each attempt's end as the fact row has it (000 "Fact Rows").
            "job_attempts": [
                {
                    "attempt": a.attempt,
                    "status": a.status,
                    "worker": a.worker,
                    "started_at": ts(a.started_at),
                    "completed_at": ts(a.completed_at),
                    "error": a.error,
                    # The sandbox profile the plugin ran under (None: nothing was spawned).
                    "sandbox": a.sandbox,
                }
                for a in JobAttempt.objects.filter(job_id=job.id).order_by("attempt")
            ],
            # Every host the plugin asked the egress proxy for (network: egress), per attempt.
            "egress": EgressHost.objects.of_job(job.id),
            "stopwatch": [
                {
                    "attempt": s.attempt,
                    "step_name": s.step_name,
                    "dur_ns": s.dur_ns,
                    "runtime_pre_ns": s.runtime_pre_ns,
                    "runtime_post_ns": s.runtime_post_ns,
                    "status": s.status,
                    "subs": s.subs_json,
                }
                for s in JobStopwatch.objects.filter(job_id=job.id).order_by("id")
            ],
            "context": {
                "id": context.id,
                "pipeline": context.pipeline_name,
                "step": context.step_id,
                "baggage": baggage,
            }
            if context
            else None,
            "parent": job_summary(parent) if parent else None,
            "tree": job_tree(job),
            "children": [job_summary(c) for c in Job.objects.filter(parent_job_id=job.id).order_by("created_at")],
        }
    )


def queue_status(now: datetime | None = None, lease_ttl: float = 60.0) -> dict[str, Any]:
    now = now or timezone.now()
    counts = dict(Job.objects.values_list("status").annotate(n=Count("id")).order_by())
    workers = WorkerInstance.objects.heartbeating(now, lease_ttl).workers().order_by("started_at")
    return {
        "queue": {status: counts.get(status, 0) for status in JobStatus.values},
        # Outstanding work, as /healthz and the original count it: queued and running.
        "queue_depth": counts.get(JobStatus.QUEUED, 0) + counts.get(JobStatus.RUNNING, 0),
        "retry_waiting": Job.objects.queued().filter(Q(next_retry_at__gt=now)).count(),
        "workers": [
            {
                "id": w.id,
                "hostname": w.hostname,
                "pid": w.pid,
                "threads": w.threads,
                "plugins": w.plugins or "*",
                "started_at": ts(w.started_at),
                "heartbeat_at": ts(w.heartbeat_at),
            }
            for w in workers
        ],
    }


def health_status(runtime: Runtime, uptime_seconds: int) -> dict[str, Any]:
    """The `/healthz` fields the API and the webhook listener share (spec 000 §9, §10.3)."""
    return {
        "status": "ok",
        "uptime_seconds": uptime_seconds,
        # Outstanding work, as the original's /healthz counts it: queued and running.
        "queue_depth": Job.objects.filter(status__in=(JobStatus.QUEUED, JobStatus.RUNNING)).count(),
        "plugins_loaded": len(runtime.registry.instances),
        "plugins_circuit_open": CircuitBreaker.objects.tripped().count(),
        # Plugins whose queued jobs no live node claims: they wait until one that serves them runs.
        "plugins_unserved": [
            waiting["plugin"] for waiting in unserved_plugins(timezone.now(), runtime.config.service.lease_ttl)
        ],
    }


def tree_root(job: Job) -> Job:
    """The root of the tree `job` is in (hook-started roots keep `parent_job_id` for tracing, so
    the walk goes up through them to the job whose end fired the hook)."""
    seen = {job.id}
    while job.parent_job_id and job.parent_job_id not in seen:
        parent = Job.objects.filter(pk=job.parent_job_id).first()
        if parent is None:
            break  # pruned by retention: the oldest surviving ancestor stands in for the root
        seen.add(parent.id)
        job = parent
    return job


def job_tree(job: Job) -> list[dict[str, Any]]:
    """Every hop of the tree `job` belongs to, parents before children: what ran, where in which
    pipeline, with what baggage, which event led there, and the baggage each hop added."""
    jobs = Job.objects.tree([tree_root(job).id])
    contexts = {
        c.id: c for c in EventContext.objects.filter(pk__in=[j.event_context_id for j in jobs if j.event_context_id])
    }
    hops = []
    for j in jobs:
        context = contexts.get(j.event_context_id or "")
        parent_context = contexts.get(context.parent_id or "") if context else None
        baggage = context.accumulated_json if context else None
        hops.append(
            {
                **job_summary(j),
                "this_job": j.id == job.id,
                "route_depth": j.route_depth,
                "event_type": (j.event or {}).get("type"),
                "pipeline": context.pipeline_name if context else None,
                "step": context.step_id if context else None,
                "baggage": baggage,
                "baggage_added": added_paths(
                    claims_only(parent_context.accumulated_json if parent_context else {}), claims_only(baggage)
                ),
                "result": latest_result(j),
            }
        )
    return hops


Node = TypeVar("Node")


def depth_first(
    nodes: Sequence[Node], id_of: Callable[[Node], str], parent_of: Callable[[Node], str | None]
) -> list[tuple[Node, int]]:
    """A tree's nodes in drawing order, each with its depth: every node's children right under it,
    siblings in their given order. `nodes` as `Job.objects.tree` and `job_tree` list them, level by
    level, would put a replay's children after its last sibling's; a node whose parent is not
    among them (the root: a hook-started root keeps its parent for tracing) starts at depth 0."""
    ids = {id_of(node) for node in nodes}
    children: dict[str | None, list[Node]] = {}
    for node in nodes:
        parent = parent_of(node)
        children.setdefault(parent if parent in ids else None, []).append(node)
    ordered: list[tuple[Node, int]] = []
    stack = [(node, 0) for node in reversed(children.get(None, []))]
    while stack:  # not recursive: a chain can be deeper than Python's recursion limit
        node, depth = stack.pop()
        ordered.append((node, depth))
        stack += [(child, depth + 1) for child in reversed(children.get(id_of(node), []))]
    return ordered


def claims_only(baggage: Any) -> dict[str, Any]:
    """Baggage without the core's per-hop control fields (`ductile.*`): what steps claimed."""
    return {k: v for k, v in (baggage or {}).items() if k != CONTROL}


def added_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    """The dotted baggage paths `after` has that `before` lacks (what a hop's claims merged in)."""
    if not isinstance(after, dict):
        return [] if before == after or not prefix else [prefix]
    out = []
    for key, value in after.items():
        path = f"{prefix}.{key}" if prefix else key
        if not isinstance(before, dict) or key not in before:
            out.append(path)
        else:
            out += added_paths(before[key], value, path)
    return out


def breaker_report(
    breaker: CircuitBreaker | None, limit: int = 20, *, plugin: str = "", command: str = ""
) -> dict[str, Any]:
    """One breaker as `system breaker --json` shows it, in the original's shape and field names;
    None (no outcome counted yet) is a breaker without a row: `state` null, no transitions."""
    plugin, command = (breaker.plugin, breaker.command) if breaker else (plugin, command)
    history = CircuitBreakerTransition.objects.filter(plugin=plugin, command=command)
    return {
        "plugin": plugin,
        "command": command,
        "state": breaker.state if breaker else None,
        "failure_count": breaker.failure_count if breaker else 0,
        "opened_at": ts(breaker.opened_at) if breaker else None,
        "last_failure_at": ts(breaker.last_failure_at) if breaker else None,
        "last_job_id": breaker.last_job_id if breaker else None,
        "updated_at": ts(breaker.updated_at) if breaker else None,
        "transitions": [
            {
                "id": t.id,
                "from_state": t.from_state,
                "to_state": t.to_state,
                "failure_count": t.failure_count,
                "reason": t.reason,
                "job_id": t.job_id,
                "actor": t.actor,
                "created_at": ts(t.created_at),
            }
            for t in history.order_by("-created_at")[:limit]
        ],
    }


def schedule_entries(runtime: Runtime, now: datetime) -> list[dict[str, Any]]:
    """Every configured schedule entry (`schedule_report`), then the rows no longer configured:
    `system scheduler --json`'s `entries` and `GET /scheduler/jobs`'s `jobs`."""
    rows = {(r.plugin, r.schedule_id): r for r in ScheduleEntry.objects.all()}
    entries = []
    for schedule in runtime.config.scheduled_entries():
        entries.append(schedule_report(schedule, rows.pop((schedule.plugin, schedule.id), None), now))
    return entries + [schedule_report(None, row, now) for row in rows.values()]


def schedule_when(schedule: Schedule) -> str:
    """The entry's trigger as written: `7m`, `monthly`, `0 9 * * 1-5`, an RFC 3339 instant, `30s`."""
    if schedule.every is not None:
        return schedule.every.text
    if schedule.cron is not None:
        return schedule.cron
    if schedule.at is not None:
        return rfc3339(schedule.at)
    assert schedule.after is not None
    return format_duration(schedule.after.total_seconds())


def schedule_report(schedule: Schedule | None, row: ScheduleEntry | None, now: datetime) -> dict[str, Any]:
    """One schedule entry as `system scheduler` shows it: the config's definition and the
    scheduler's durable state. Before `runscheduler` first sees it, the next run is computed."""
    assert schedule is not None or row is not None
    next_run_at = row.next_run_at if row else None
    if row is None and schedule is not None:
        next_run_at = first_due(schedule, now, started_at=now, last_success_at=None)
    return {
        "plugin": schedule.plugin if schedule else row.plugin,  # type: ignore[union-attr]
        "schedule_id": schedule.id if schedule else row.schedule_id,  # type: ignore[union-attr]
        "command": schedule.command if schedule else row.command,  # type: ignore[union-attr]
        "kind": schedule.kind.value if schedule else None,
        "mode": schedule.kind.value if schedule else None,  # the original's name for `kind`
        "when": schedule_when(schedule) if schedule else None,
        "timezone": str(schedule.timezone) if schedule else None,
        "status": row.status if row else "not_started",
        "reason": row.reason if row else ("runscheduler has not run with this entry yet" if schedule else None),
        "next_run_at": ts(next_run_at),
        "last_fired_at": ts(row.last_fired_at) if row else None,
        "last_job_id": row.last_job_id if row else None,
        "last_success_at": ts(row.last_success_at) if row else None,
        "last_success_job_id": row.last_success_job_id if row else None,
    }


def seal_status(config_dir: Path) -> list[dict[str, str]]:
    """Every config file and what the `.checksums` seal says of it: ok, changed, not sealed or
    unreadable (`config check --json`, the console's config page)."""
    try:
        files = config_files(config_dir)
    except ConfigError:
        return []
    try:
        seal = read_seal(config_dir)
    except SealUnusable:
        seal = None
    hashes = seal.hashes if seal else {}
    out = []
    for path in files:
        actual, expected = file_digest(path), hashes.get(str(path))
        status = "unreadable" if actual is None else "not sealed" if expected is None else "ok"
        if expected is not None and actual is not None and expected != actual:
            status = "changed"
        out.append({"path": str(path), "tier": str(tier_of(path)), "status": status})
    return out
