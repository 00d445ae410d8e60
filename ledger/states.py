"""Job states and the transitions the spec allows (000 §3.3). Anything else is refused."""

from __future__ import annotations

from django.db import models


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    DEAD = "dead"


ALLOWED_TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({JobStatus.QUEUED}),
    # queued -> dead: a job whose plugin was removed or disabled on reload is cancelled, or a
    # successor stopped at its route depth. queued -> failed: a pipeline step whose own baggage claim
    # failed never runs (003 §3.7: "Missing source paths fail the job").
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.FAILED, JobStatus.DEAD}),
    JobStatus.RUNNING: frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.DEAD}),
    JobStatus.FAILED: frozenset({JobStatus.QUEUED, JobStatus.DEAD}),
    JobStatus.TIMED_OUT: frozenset({JobStatus.QUEUED, JobStatus.DEAD}),
    JobStatus.SUCCEEDED: frozenset(),
    # dead -> queued: only an operator's "retry now" (`job retry`, the console); nothing automatic.
    JobStatus.DEAD: frozenset({JobStatus.QUEUED}),
}

# Statuses a job can rest in for good. `failed`/`timed_out` rest only when not retried.
TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.DEAD})

STATUS_ALIASES = {"pending": JobStatus.QUEUED, "ok": JobStatus.SUCCEEDED, "error": JobStatus.FAILED}


class IllegalTransition(Exception):
    def __init__(self, job_id: str, from_status: str | None, to_status: str):
        super().__init__(f"job {job_id}: transition {from_status} -> {to_status} is not allowed")


class ActionRefused(Exception):
    """An operator's action that the record's present state does not allow (cancel a running job,
    reset a closed breaker, ...); the message says why, for the CLI's stderr and the console."""


def check_transition(job_id: str, from_status: str | None, to_status: str) -> None:
    if to_status not in ALLOWED_TRANSITIONS.get(from_status, frozenset()):
        raise IllegalTransition(job_id, from_status, to_status)
