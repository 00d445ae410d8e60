"""What an operator does by hand, shared by the CLI's verbs and the audit console's buttons
(ARCHITECTURE, "Human surfaces"): the same ledger methods either way, and the person named in
what the ledger records. The state changes themselves are ledger methods (`Job.cancel`,
`Job.retry_now`, `CircuitBreakerQuerySet.reset`, `ScheduleEntry.pause_by_hand`); what needs the
loaded config (a replay's attempts, a resumed entry's next run) is here."""

from __future__ import annotations

from datetime import datetime

from gateway.events import enqueue, replay_spec
from gateway.runtime import Runtime
from gateway.scheduler.spec import scheduled_entries
from gateway.scheduler.timing import next_run
from ledger.models import Job, ScheduleEntry
from ledger.states import ActionRefused

# Who the CLI's actions are recorded as: `submitted_by` of the jobs it enqueues (spec §3.2).
CLI = "cli"
# `job_queue.submitted_by` holds 64 characters.
SUBMITTER_LENGTH = 64


def console_actor(username: str) -> str:
    """A console user as the ledger records them: `admin:alice`."""
    return f"admin:{username}"[:SUBMITTER_LENGTH]


def replay(runtime: Runtime, job: Job, *, by: str) -> str:
    """A new job for the same step from the stored context; `by` is its submitter. Its id."""
    return enqueue(runtime, [replay_spec(runtime, job, submitted_by=by)])[0]


def resume_schedule(runtime: Runtime, entry: ScheduleEntry, *, now: datetime, dry_run: bool = False) -> None:
    """Fire again from the next run after now (missed runs are not caught up). ActionRefused
    when the entry is no longer configured, or (`ScheduleEntry.resume_by_hand`) not paused by hand."""
    target = (entry.plugin, entry.schedule_id)
    schedule = next((s for s in scheduled_entries(runtime.config) if (s.plugin, s.id) == target), None)
    if schedule is None:
        raise ActionRefused(f"{entry.address} is no longer configured; it cannot be resumed")
    if not dry_run:
        run = next_run(schedule, now, started_at=now)
        entry.resume_by_hand(next_run_at=run.due if run else None, now=now)
