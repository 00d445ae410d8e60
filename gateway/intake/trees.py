"""Waiting on job trees: the "guarded bridge" synchronous pipelines stand on (spec 000 §8.3).

The engine stays asynchronous; a caller that wants the answer waits here until every job under
its roots is terminal or its timeout passes. "Terminal" is exact because a job's successors are
enqueued in the transaction that ends it. The waiter sleeps on finish wake-ups (a same-host
socket, or LISTEN on PostgreSQL) and re-checks the database at least every second regardless.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from gateway.reports import job_read
from gateway.storage.wakeup import WakeListener
from ledger import wakeups
from ledger.models import Job
from ledger.states import JobStatus
from pipelines.dsl import SWITCH

# The longest a waiter trusts wake-ups alone: a lost datagram or a dropped LISTEN connection
# costs at most this much latency, never a hang.
RECHECK_SECONDS = 1.0


@dataclass(frozen=True)
class TreeOutcome:
    root_ids: tuple[str, ...]
    jobs: tuple[Job, ...]
    complete: bool

    @property
    def status(self) -> str:
        """`running` until complete; then the first job that did not succeed decides, root first."""
        if not self.complete:
            return "running"
        failed = next((j for j in self.jobs if j.status != JobStatus.SUCCEEDED), None)
        return str(failed.status) if failed else str(JobStatus.SUCCEEDED)

    @property
    def duration_ms(self) -> int:
        if not self.jobs:
            return 0
        start = min(j.created_at for j in self.jobs)
        ends = [j.completed_at for j in self.jobs if j.completed_at]
        return int((max(ends) - start).total_seconds() * 1000) if ends else 0

    def terminal_job(self) -> Job | None:
        """The job whose result answers the caller: the last plugin step to finish among the leaves.
        A `core.switch` is never the answer, so a bypassed step does not become the result."""
        parents = {j.parent_job_id for j in self.jobs}
        steps = [j for j in self.jobs if j.plugin != SWITCH and j.completed_at]
        leaves = [j for j in steps if j.id not in parents and j.status == JobStatus.SUCCEEDED] or steps
        return max(leaves, key=lambda j: j.completed_at, default=None)  # type: ignore[arg-type, return-value]

    def report(self) -> dict[str, Any]:
        """The API's synchronous answer (spec "API Reference": POST /pipeline/{name})."""
        terminal = self.terminal_job()
        tree = [job_read(j) for j in self.jobs]
        data: dict[str, Any] = {
            "job_id": self.root_ids[0] if self.root_ids else None,
            "job_ids": list(self.root_ids),
            "status": self.status,
            "duration_ms": self.duration_ms,
            "result": next(hop["result"] for hop in tree if hop["job_id"] == terminal.id) if terminal else None,
            "tree": tree,
        }
        if not self.complete:
            data["timeout_exceeded"] = True
            data["message"] = "Pipeline still running after timeout."
        return data


class TreeWaiter:
    """`with TreeWaiter() as waiter: ids = enqueue(...); outcome = waiter.wait(ids, 30)`.
    Enter before enqueueing so no finish can slip past between the enqueue and the first check."""

    def __init__(self) -> None:
        self._changed = threading.Event()
        self._listener = WakeListener(self._changed.set, wakeups.FINISHED)

    def __enter__(self) -> TreeWaiter:
        self._listener.start()  # jobs finished by this very process call back directly
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._listener.stop()

    def wait(self, root_ids: Sequence[str], timeout: float) -> TreeOutcome:
        deadline = time.monotonic() + timeout
        while True:
            # Clear before reading: a finish that lands during the read sets the flag again, so
            # the next wait returns at once instead of sleeping through it.
            self._changed.clear()
            jobs = Job.objects.tree(root_ids)
            if all(j.is_terminal for j in jobs):
                return TreeOutcome(tuple(root_ids), tuple(jobs), complete=True)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return TreeOutcome(tuple(root_ids), tuple(jobs), complete=False)
            self._changed.wait(min(remaining, RECHECK_SECONDS))
