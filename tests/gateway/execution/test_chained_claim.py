"""A worker claims its next job in the transaction that records the last one's outcome (one write
transaction per job instead of two, issue 16); the outcome never depends on that claim."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from gateway.execution.dispatch import Executor
from gateway.intake.events import publish_event
from ledger import job_notifications
from ledger.models import Job, JobSpec
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.config_dirs import ConfigDir
from tests.support.runtime import load_runtime

# Real commits: what is pinned here is the worker's own transactions (no savepoint), which a test's
# rolled-back transaction would turn into savepoints.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def enqueue(plugin: str = "echo") -> str:
    return Job.objects.enqueue(
        JobSpec(plugin=plugin, command="poll", submitter=Submitter.CLI), default_dedupe_ttl=0
    ).job_id


def claim(holder: Any, only: str | None = None) -> Job | None:
    caps = holder.get().registry.parallelism_caps()
    return Job.objects.claim_next(worker_id="w1", caps=caps, lease_ttl=60, only=only)


def test_the_next_job_is_claimed_with_the_outcome_and_handed_back(runtime: Any) -> None:
    first, second = enqueue(), enqueue()
    job = claim(runtime, only=first)
    assert job is not None

    following = Executor(runtime, "w1", claim_next=lambda: claim(runtime)).execute(job)

    assert Job.objects.get(pk=first).status == JobStatus.SUCCEEDED
    assert following is not None and following.id == second
    stored = Job.objects.get(pk=second)
    assert stored.status == JobStatus.RUNNING and stored.claimed_by == "w1"


def test_the_outcome_and_the_claim_need_no_savepoint(runtime: Any) -> None:
    """A savepoint around the claim was two more statements on every job (~70 µs of the daemon's
    CPU per job, docs/performance.md); a refused claim is handled by recording the outcome again."""
    first, _ = enqueue(), enqueue()
    job = claim(runtime, only=first)
    assert job is not None

    with CaptureQueriesContext(connection) as queries:
        following = Executor(runtime, "w1", claim_next=lambda: claim(runtime)).execute(job)

    assert following is not None
    assert [q["sql"] for q in queries if "SAVEPOINT" in q["sql"].upper()] == []


def test_a_claim_the_database_refuses_leaves_the_outcome_recorded(runtime: Any) -> None:
    first, second = enqueue(), enqueue()
    job = claim(runtime, only=first)
    assert job is not None

    def refused() -> Job | None:
        claim(runtime)  # takes the job, then the database fails: the rollback undoes the claim
        raise OperationalError("database or disk is full")

    following = Executor(runtime, "w1", claim_next=refused).execute(job)

    assert following is None
    assert Job.objects.get(pk=first).status == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=second).status == JobStatus.QUEUED


def test_without_a_job_to_claim_the_worker_is_handed_nothing(runtime: Any) -> None:
    job = claim(runtime, only=enqueue())
    assert job is not None
    assert Executor(runtime, "w1", claim_next=lambda: claim(runtime)).execute(job) is None
    assert Job.objects.get(pk=job.id).status == JobStatus.SUCCEEDED


@pytest.fixture
def woken() -> Iterator[list[int]]:
    """Every wake-up of this process's idle workers an enqueue asks for (the pool's `wake`)."""
    calls: list[int] = []
    listener = lambda: calls.append(1)  # noqa: E731 - one identity to add and remove
    job_notifications.add_listener(listener)
    yield calls
    job_notifications.remove_listener(listener)


def start_pipeline(config_dir: ConfigDir, steps: list[dict[str, Any]]) -> tuple[Any, Job]:
    """The pipeline's root job, claimed by worker w1."""
    config_dir.extra["pipelines"] = [{"name": "p", "on": "p.start", "steps": steps}]
    holder = load_runtime(config_dir)
    publish_event(holder.get(), "p.start", {}, submitter=Submitter.CLI)
    root = claim(holder)
    assert root is not None
    return holder, root


def test_a_routed_step_claimed_with_the_outcome_wakes_no_idle_thread(config_dir: ConfigDir, woken: list[int]) -> None:
    # Woken, the idle thread looks, finds nothing (this worker took the step) and takes the GIL
    # from the worker as it starts the step's plugin.
    holder, root = start_pipeline(config_dir, [{"id": "a", "uses": "echo"}, {"id": "b", "uses": "echo"}])
    woken.clear()  # the root's enqueue

    following = Executor(holder, "w1", claim_next=lambda: claim(holder)).execute(root)

    assert following is not None and following.parent_job_id == root.id
    assert woken == []


def test_the_idle_threads_are_woken_for_what_the_worker_did_not_take(config_dir: ConfigDir, woken: list[int]) -> None:
    split = {"split": [{"id": "left", "uses": "echo"}, {"id": "right", "uses": "echo"}]}
    holder, root = start_pipeline(config_dir, [{"id": "a", "uses": "echo"}, split])
    woken.clear()

    following = Executor(holder, "w1", claim_next=lambda: claim(holder)).execute(root)

    assert following is not None and following.parent_job_id == root.id
    assert Job.objects.filter(parent_job_id=root.id, status=JobStatus.QUEUED).count() == 1
    assert woken == [1]  # once for the branch left queued


def test_an_older_job_claimed_instead_of_the_routed_step_wakes_the_idle_threads(
    config_dir: ConfigDir, woken: list[int]
) -> None:
    holder, root = start_pipeline(config_dir, [{"id": "a", "uses": "echo"}, {"id": "b", "uses": "echo"}])
    older = enqueue()
    woken.clear()

    following = Executor(holder, "w1", claim_next=lambda: claim(holder)).execute(root)

    assert following is not None and following.id == older  # FIFO: the step waits for another thread
    assert woken == [1]
