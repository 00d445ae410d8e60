"""Waiting on job trees: the "guarded bridge" synchronous pipelines stand on (spec 000 §8.3).

The engine stays asynchronous; a caller that wants the answer waits here until every job under
its roots is terminal or its timeout passes. "Terminal" is exact because a job's successors are
enqueued in the transaction that ends it. The waiter sleeps on finish wake-ups (a same-host
socket, or LISTEN on PostgreSQL) and re-checks the database at least every second regardless.

Once the roots are recorded, only the deadline ends the wait: a read the database refuses (a
restart, a blip) is tried again until then, and a tree still unread at the deadline is answered
as one still running, with why. A caller told "nothing was recorded" would start it all again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from django.db import DatabaseError, InterfaceError, connection

from gateway.reports import job_read, latest_result
from gateway.storage.database import unavailable_reason
from gateway.storage.wake_listener import WakeListener
from ledger import job_notifications
from ledger.models import Job
from ledger.states import JobStatus
from pipelines.dsl import SWITCH

# The longest a waiter trusts wake-ups alone: a lost datagram or a dropped LISTEN connection
# costs at most this much latency, never a hang.
RECHECK_SECONDS = 1.0
# A read the database refused is tried again after this long, doubling up to RECHECK_SECONDS.
READ_RETRY_FIRST = 0.1
# How often a waiter whose caller may leave looks whether it has (`wait`'s `gone`).
GONE_CHECK_SECONDS = 0.25


class CallerGone(Exception):
    """The caller stopped waiting (it closed its connection): the wait ends, the jobs run on."""


@dataclass(frozen=True)
class TreeOutcome:
    root_ids: tuple[str, ...]
    jobs: tuple[Job, ...]
    complete: bool
    # Each job's latest result (`reports.latest_result`), read with the jobs.
    results: Mapping[str, Any] = field(default_factory=dict)
    # Why the tree could not be read by the deadline (its jobs are then unknown), or None.
    unread: str | None = None

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
        # The results as the wait read them: building the answer reads nothing (the database may be away).
        tree = [job_read(j, self.results.get(j.id)) for j in self.jobs]
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
            if self.unread is not None and self.root_ids:
                data["message"] = (
                    f"The pipeline was started, but its jobs could not be read before the timeout "
                    f"({self.unread}); follow job {self.root_ids[0]} (GET /job/{self.root_ids[0]}/tree)."
                )
        return data


class TreeWaiter:
    """`with TreeWaiter() as waiter: ids = enqueue(...); outcome = waiter.wait(ids, 30)`.
    Enter before enqueueing so no finish can slip past between the enqueue and the first check."""

    def __init__(self) -> None:
        self._changed = threading.Event()
        self._listener = WakeListener(self._changed.set, job_notifications.FINISHED)

    def __enter__(self) -> TreeWaiter:
        self._listener.start()  # jobs finished by this very process call back directly
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._listener.stop()

    def wait(self, root_ids: Sequence[str], timeout: float, *, gone: Callable[[], bool] | None = None) -> TreeOutcome:
        """The tree once complete, or as it stands at the deadline; read again until then when the
        database refuses a read (the module docstring). `gone` says whether the caller left: it is
        asked at each wake-up, at least every GONE_CHECK_SECONDS, and CallerGone ends the wait."""
        roots = tuple(root_ids)
        deadline = time.monotonic() + timeout
        retry = READ_RETRY_FIRST
        while True:
            # Clear before reading: a finish that lands during the read sets the flag again, so
            # the next wait returns at once instead of sleeping through it.
            self._changed.clear()
            try:
                jobs = tuple(Job.objects.tree(roots))
                complete = all(j.is_terminal for j in jobs)
                remaining = deadline - time.monotonic()
                if complete or remaining <= 0:
                    return TreeOutcome(roots, jobs, complete, results={j.id: latest_result(j) for j in jobs})
                pause, retry = RECHECK_SECONDS, READ_RETRY_FIRST
            except (DatabaseError, InterfaceError) as exc:
                connection.close_if_unusable_or_obsolete()  # a connection the blip broke is replaced
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return TreeOutcome(roots, (), complete=False, unread=unavailable_reason(exc))
                pause, retry = retry, min(retry * 2, RECHECK_SECONDS)
            self._sleep(min(remaining, pause), gone)

    def _sleep(self, seconds: float, gone: Callable[[], bool] | None) -> None:
        """Until a finish wakes this waiter or `seconds` pass; CallerGone when `gone` says so."""
        if gone is None:
            self._changed.wait(seconds)
            return
        end = time.monotonic() + seconds
        while True:
            woken = self._changed.wait(max(min(end - time.monotonic(), GONE_CHECK_SECONDS), 0.0))
            if gone():
                raise CallerGone
            if woken or time.monotonic() >= end:
                return
