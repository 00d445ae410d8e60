"""What a job's attempt announces about itself: its preflight decision, a retry or a dead end,
the poll events around a scheduled poll, and the lifecycle signals (003 §9) that `on-hook`
pipelines listen for. Built from the ledger's row; where they go is `pipelines.completion`'s call."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from gateway.runtime import Runtime
from ledger.ids import new_id
from ledger.models import AttemptOutcome, Job
from ledger.models.jobs import backoff_seconds
from ledger.states import JobStatus
from ledger.submitters import Submitter
from ledger.timestamps import rfc3339


def endings(job: Job, outcome: AttemptOutcome, final: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The events that open an attempt's story (`poll.started`) and those announcing how it ended:
    `job.retry_scheduled` (with the time the retry is due, fixed here so the event and the row
    agree) or `job.retry_exhausted`, and `poll.completed`. `final`: the job's status for good, None
    when it will be retried."""
    polled = job.command == "poll" and job.submitter is Submitter.SCHEDULER
    if final not in (None, JobStatus.DEAD) and not polled:
        return [], []  # the common case: nothing to announce
    announced: list[dict[str, Any]] = []
    if final is None:
        delay = backoff_seconds(job.attempt, outcome.backoff_base)
        outcome.retry_at = timezone.now() + timedelta(seconds=delay)
        announced.append(retry_scheduled_event(job, outcome, delay))
    elif final == JobStatus.DEAD:
        announced.append(retry_exhausted_event(job, outcome))
    if not polled:
        return [], announced
    return [poll_event(job, outcome, "poll.started")], [*announced, poll_event(job, outcome, "poll.completed")]


def signals(
    runtime: Runtime, job: Job, outcome: AttemptOutcome, final: str | None, *, recovery: bool = False
) -> tuple[list[dict[str, Any]], bool]:
    """The lifecycle signals a job's end logs, and whether they start `on-hook` pipelines (DSL
    reference §8-§9): a root job (or a hook-started one) of a plugin that opted in with
    `notify_on_complete` signals every end; `job.dead` is logged for every job that ends dead,
    opted in or not (003 §9). `recovery`: the job was lost with its worker and ended by lease
    recovery, not by an answer of its plugin."""
    if final is None:
        return [], False
    instance = runtime.registry.instances.get(job.plugin)
    hooks = (
        instance is not None
        and instance.config.notify_on_complete
        and runtime.pipelines.has_hooks()
        and (not job.parent_job_id or job.submitter is Submitter.HOOK)
    )
    if final != JobStatus.DEAD and not hooks:
        return [], False  # nothing to log or start: the common case costs nothing more
    found = lifecycle_signals(job, outcome, final, recovery=recovery)
    if not hooks:
        return [s for s in found if s["type"] == "job.dead"], False
    return found, True


def preflight_event(job: Job, decision: str, reason: str) -> dict[str, Any]:
    """DSL reference §6.4: every job records what preflight decided."""
    payload = {"job_id": job.id, "plugin": job.plugin, "command": job.command, "decision": decision, "reason": reason}
    return {"type": "job.preflight", "source": "core", "payload": payload}


def lifecycle_signals(job: Job, outcome: AttemptOutcome, final: str, *, recovery: bool = False) -> list[dict[str, Any]]:
    """`job.completed` for every end, plus `job.failed` or `job.timed_out`, plus `job.dead` for a
    job that ends dead (payload fields of 003 §9.1). `recovery`: the job was lost with its worker
    and ended by lease recovery, not by an answer of its plugin."""
    started = job.started_at or job.created_at
    payload: dict[str, Any] = {
        "job_id": job.id,
        "plugin": job.plugin,
        "command": job.command,
        "status": final,
        "attempt": job.attempt,
        "duration_ms": int((timezone.now() - started).total_seconds() * 1000) if started else None,
    }
    if final != JobStatus.SUCCEEDED:
        message = f"Job {final.replace('_', ' ')} [{job.plugin}]: {outcome.error or 'no error message'}"
        payload.update(message=message, text=message, error=outcome.error)
    if final == JobStatus.DEAD:
        payload.update(reason=ATTEMPTS_EXHAUSTED, max_attempts=job.max_attempts)
    if recovery:
        payload["recovery"] = True
    names = ["job.completed"]
    if final != JobStatus.SUCCEEDED:
        names.append("job.timed_out" if outcome.status == JobStatus.TIMED_OUT else "job.failed")
    if final == JobStatus.DEAD:
        names.append("job.dead")
    return [{"type": name, "source": job.plugin, "event_id": new_id(), "payload": dict(payload)} for name in names]


# The original's words for why a retryable failure was not retried again.
ATTEMPTS_EXHAUSTED = "attempts_exhausted"


def _retry_reason(outcome: AttemptOutcome) -> str:
    return "timeout" if outcome.status == JobStatus.TIMED_OUT else "plugin_error"


def retry_scheduled_event(job: Job, outcome: AttemptOutcome, delay: float) -> dict[str, Any]:
    """A failed attempt that will be tried again: which, when, and why it failed."""
    assert outcome.retry_at is not None
    payload = {
        "job_id": job.id,
        "plugin": job.plugin,
        "command": job.command,
        "status": outcome.status,
        "attempt": job.attempt,
        "next_attempt": job.attempt + 1,
        "max_attempts": job.max_attempts,
        "backoff_ms": int(delay * 1000),
        "next_retry_at": rfc3339(outcome.retry_at),
        "reason": _retry_reason(outcome),
        "error": outcome.error,
    }
    return {"type": "job.retry_scheduled", "payload": payload}


def retry_exhausted_event(job: Job, outcome: AttemptOutcome) -> dict[str, Any]:
    """A retryable failure on the last attempt: the job ends `dead` (000 §3.3)."""
    payload = {
        "job_id": job.id,
        "plugin": job.plugin,
        "command": job.command,
        "status": outcome.status,
        "attempts": job.attempt,
        "max_attempts": job.max_attempts,
        "final_error": outcome.error,
        "reason": ATTEMPTS_EXHAUSTED,
        "retry_decision_reason": _retry_reason(outcome),
    }
    return {"type": "job.retry_exhausted", "payload": payload}


def poll_event(job: Job, outcome: AttemptOutcome, kind: str) -> dict[str, Any]:
    """`poll.started` / `poll.completed` of one attempt of a scheduled poll (the original's fields;
    the schedule is named by the scheduler's dedupe key `<plugin>:<command>:<schedule id>`)."""
    prefix = f"{job.plugin}:{job.command}:"
    key = job.dedupe_key or ""
    payload: dict[str, Any] = {
        "job_id": job.id,
        "plugin": job.plugin,
        "command": job.command,
        "schedule_id": key[len(prefix) :].split(":")[0] if key.startswith(prefix) else "",
        "submitted_by": job.submitted_by,
        "attempt": job.attempt,
        "started_at": rfc3339(job.started_at) if job.started_at else None,
    }
    if kind == "poll.completed":
        started = job.started_at or job.created_at
        payload.update(status=outcome.status, outcome=outcome.status, error=outcome.error)
        payload["duration_ms"] = int((timezone.now() - started).total_seconds() * 1000) if started else None
    return {"type": kind, "payload": payload}
