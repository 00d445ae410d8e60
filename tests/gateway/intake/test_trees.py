"""Waiting on a job tree (gateway/intake/trees.py), the bridge synchronous pipelines stand on: a
tree is complete when every job under its roots is terminal, the first job that did not succeed
decides its status, the last plugin leaf to finish is its answer, and a wait ends at its deadline
or when its caller leaves. In-process, on the test's own transaction; the jobs finish as a worker
would record them (their rows), no plugin runs."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from gateway import intake
from gateway.intake.trees import GONE_CHECK_SECONDS, CallerGone, TreeOutcome, TreeWaiter
from ledger.models import Job, JobLog, JobSpec
from ledger.states import JobStatus
from ledger.submitters import Submitter
from pipelines.dsl import SWITCH

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def rt(runtime):
    return runtime.get()


def enqueue(rt, plugin: str, parent: str | None = None) -> str:
    spec = JobSpec(plugin, "poll", Submitter.API, payload={}, parent_job_id=parent, max_attempts=1)
    (job_id,) = intake.submit_ids(rt, [spec])
    return job_id


def finish(job_id: str, status: str, *, at: float, result: object = None) -> None:
    """Record the job's end `at` seconds after it was enqueued, `result` as its attempt's output."""
    job = Job.objects.get(pk=job_id)
    done = job.created_at + timedelta(seconds=at)
    Job.objects.filter(pk=job_id).update(status=status, completed_at=done)
    JobLog.objects.create(
        job_id=job_id,
        plugin=job.plugin,
        command=job.command,
        status=status,
        result=json.dumps(result),
        attempt=1,
        submitted_by=job.submitted_by,
        created_at=job.created_at,
        completed_at=done,
    )


def test_a_tree_with_a_job_still_queued_is_answered_as_running_at_the_deadline(rt):
    root = enqueue(rt, "probe")
    child = enqueue(rt, "echo", parent=root)
    finish(root, JobStatus.SUCCEEDED, at=0)
    started = time.monotonic()
    with TreeWaiter() as waiter:
        outcome = waiter.wait([root], timeout=0.3)
    assert time.monotonic() - started >= 0.3
    assert (outcome.complete, outcome.status) == (False, "running")
    assert [j.id for j in outcome.jobs] == [root, child]
    report = outcome.report()
    assert (report["job_id"], report["status"], report["timeout_exceeded"]) == (root, "running", True)
    assert report["message"] == "Pipeline still running after timeout."


def test_a_finished_tree_is_answered_at_once_by_its_last_plugin_leaf_never_a_switch(rt):
    root = enqueue(rt, "probe")
    step = enqueue(rt, "echo", parent=root)
    switch = enqueue(rt, SWITCH, parent=root)
    finish(root, JobStatus.SUCCEEDED, at=1, result={"from": "root"})
    finish(step, JobStatus.SUCCEEDED, at=2, result={"from": "step"})
    finish(switch, JobStatus.SUCCEEDED, at=3, result={"from": "switch"})  # finished last, yet not the answer
    started = time.monotonic()
    with TreeWaiter() as waiter:
        outcome = waiter.wait([root], timeout=10)
    assert time.monotonic() - started < 5
    assert (outcome.complete, outcome.status) == (True, "succeeded")
    assert getattr(outcome.terminal_job(), "id", None) == step
    report = outcome.report()
    assert (report["status"], report["result"], "timeout_exceeded" in report) == ("succeeded", {"from": "step"}, False)
    assert [hop["job_id"] for hop in report["tree"]] == [root, step, switch]
    assert 3000 <= report["duration_ms"] < 4000  # the first enqueue to the last finish


def test_the_first_job_that_did_not_succeed_decides_a_finished_trees_status(rt):
    root = enqueue(rt, "probe")
    failed = enqueue(rt, "echo", parent=root)
    dead = enqueue(rt, "echo", parent=root)
    finish(root, JobStatus.SUCCEEDED, at=1)
    finish(failed, JobStatus.FAILED, at=2)
    finish(dead, JobStatus.DEAD, at=3)
    with TreeWaiter() as waiter:
        outcome = waiter.wait([root], timeout=10)
    assert (outcome.complete, outcome.status) == (True, "failed")
    # No leaf succeeded: the last step to finish answers.
    assert getattr(outcome.terminal_job(), "id", None) == dead


def test_a_caller_that_left_ends_the_wait_and_the_jobs_stay(rt):
    root = enqueue(rt, "probe")
    asked = []

    def gone() -> bool:
        asked.append(time.monotonic())
        return len(asked) >= 2

    started = time.monotonic()
    with TreeWaiter() as waiter, pytest.raises(CallerGone):
        waiter.wait([root], timeout=30, gone=gone)
    assert time.monotonic() - started < 5 * GONE_CHECK_SECONDS
    assert Job.objects.get(pk=root).status == JobStatus.QUEUED


def test_a_tree_unread_by_the_deadline_says_it_was_started_and_which_job_to_follow():
    outcome = TreeOutcome(("r1",), (), complete=False, unread="the database is unavailable")
    report = outcome.report()
    assert (report["status"], report["job_ids"], report["tree"], report["duration_ms"]) == ("running", ["r1"], [], 0)
    assert report["message"] == (
        "The pipeline was started, but its jobs could not be read before the timeout "
        "(the database is unavailable); follow job r1 (GET /job/r1/tree)."
    )
