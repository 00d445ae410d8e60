"""What an operator does by hand, shared by the CLI's verbs and the audit console's buttons
(ARCHITECTURE, "Human surfaces"): the same ledger methods either way, and the person named in
what the ledger records. The state changes themselves are ledger methods (`Job.cancel`,
`Job.retry_now`, `CircuitBreakerQuerySet.reset`, `ScheduleEntry.pause_by_hand`); what needs the
loaded config (a replay's attempts, a resumed entry's next run) is here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gateway import intake
from gateway.runtime import Runtime
from gateway.scheduler.timing import first_due
from ledger.models import Job, ScheduleEntry
from ledger.states import ActionRefused
from ledger.submitters import Submitter


@dataclass(frozen=True)
class Actor:
    """Who acts by hand: the CLI, or a person in the audit console. As text (`cli`,
    `admin:alice`) it is what the ledger records: a transition's reason, a breaker's actor."""

    submitter: Submitter
    name: str | None = None

    def __str__(self) -> str:
        return self.submitter.by(self.name)


# The CLI's actions are recorded as `cli` (spec §3.2: the submitter of the jobs it enqueues).
CLI = Actor(Submitter.CLI)


def console_actor(username: str) -> Actor:
    return Actor(Submitter.ADMIN, username)


def replay(runtime: Runtime, job: Job, *, by: Actor) -> str:
    """A new job for the same step from the stored context, submitted by `by`. Its id."""
    return intake.submit_ids(runtime, [intake.replay(runtime, job, by.submitter, actor=by.name)])[0]


def resume_schedule(runtime: Runtime, entry: ScheduleEntry, *, now: datetime, dry_run: bool = False) -> None:
    """Fire again from the next run after now (`every`: an interval after the last success, or
    now; missed runs are not caught up). ActionRefused
    when the entry is no longer configured, or (`ScheduleEntry.resume_by_hand`) not paused by hand."""
    target = (entry.plugin, entry.schedule_id)
    schedule = next((s for s in runtime.config.scheduled_entries() if (s.plugin, s.id) == target), None)
    if schedule is None:
        raise ActionRefused(f"{entry.address} is no longer configured; it cannot be resumed")
    if not dry_run:
        due = first_due(schedule, now, started_at=now, last_success_at=entry.last_success_at)
        entry.resume_by_hand(next_run_at=due, now=now)
