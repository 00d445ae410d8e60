"""Claims racing each other on PostgreSQL, as workers on several nodes make them: each thread is a
claimer with a connection of its own, and all of them claim at the same instant (a barrier), many
rounds over. The caps across nodes and on one node, the same-key rule, FIFO and exactly-one-claim
hold, and a claimer that lost the race for a plugin's last slot takes other work instead of
going idle (issue 38: the guards that replaced the one advisory lock every claim queued behind).

PostgreSQL only: SQLite's write lock lets one claim decide at a time, so nothing races there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from ledger.caps import Cap
from ledger.models import Job, JobSpec, JobTransition
from ledger.states import JobStatus
from ledger.submitters import Submitter
from ledger.writes.transaction import writing

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),  # each claimer's commit is what the others must see
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="claims race only on PostgreSQL"),
]
CLAIMERS = 8
ROUNDS = 12


def enqueue(count: int, plugin: str = "echo", **kw: Any) -> list[str]:
    spec = JobSpec(plugin=plugin, command="poll", submitter=Submitter.CLI, **kw)
    return [Job.objects.enqueue(spec, default_dedupe_ttl=0).job_id for _ in range(count)]


def together(claim: Callable[[int], Any], claimers: int = CLAIMERS) -> list[Any]:
    """What `claim(n)` returned in each of `claimers` threads started at the same instant."""
    barrier = threading.Barrier(claimers)
    results: list[Any] = [None] * claimers
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait()
            results[n] = claim(n)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


def claim(caps: dict[str, Cap | int], worker: str, slots: int | None = None) -> Job | None:
    return Job.objects.claim_next(worker_id=worker, caps=caps, lease_ttl=60, slots=slots)


def requeue_all() -> None:
    Job.objects.filter(status=JobStatus.RUNNING).update(status=JobStatus.QUEUED, claimed_by=None)


def running(plugin: str = "echo") -> int:
    return Job.objects.filter(status=JobStatus.RUNNING, plugin=plugin).count()


def test_a_cap_across_nodes_holds_when_every_node_claims_at_once() -> None:
    enqueue(20)
    caps: dict[str, Cap | int] = {"echo": Cap(2, 8)}
    for _ in range(ROUNDS):
        won = [job for job in together(lambda n: claim(caps, f"node-{n}", slots=8)) if job is not None]
        assert len(won) == 2 and running() == 2, [job.claimed_by for job in won]
        requeue_all()


def test_a_node_cap_holds_among_the_threads_of_one_node() -> None:
    enqueue(20)
    caps: dict[str, Cap | int] = {"echo": Cap(None, 2)}
    for _ in range(ROUNDS):
        won = [job for job in together(lambda n: claim(caps, "node-a", slots=CLAIMERS)) if job is not None]
        assert len(won) == 2 and running() == 2
        requeue_all()


def test_one_of_many_same_key_twins_runs_at_a_time() -> None:
    enqueue(CLAIMERS, dedupe_key="nightly-report")
    caps: dict[str, Cap | int] = {"echo": Cap(None, 8)}
    for _ in range(ROUNDS):
        won = [job for job in together(lambda n: claim(caps, f"node-{n}", slots=8)) if job is not None]
        assert len(won) == 1 and running() == 1
        requeue_all()


def test_uncapped_claims_take_every_job_once_each_claimer_in_queue_order() -> None:
    ids = enqueue(60)
    order = {job_id: n for n, job_id in enumerate(ids)}
    # Created a microsecond apart at least: FIFO is (created_at, id).
    for n, job_id in enumerate(ids):
        Job.objects.filter(pk=job_id).update(created_at=timezone.now() - timedelta(seconds=600 - n))
    caps: dict[str, Cap | int] = {"echo": Cap(None, 100)}

    def drain(n: int) -> list[str]:
        taken = []
        while (job := claim(caps, f"node-{n}", slots=100)) is not None:
            taken.append(job.id)
        return taken

    taken = together(drain)
    every = [job_id for mine in taken for job_id in mine]
    assert sorted(every) == sorted(ids)  # each job once, none left
    assert all(mine == sorted(mine, key=order.__getitem__) for mine in taken)  # oldest first
    claimed = JobTransition.objects.filter(from_status=JobStatus.QUEUED, to_status=JobStatus.RUNNING)
    assert claimed.count() == len(ids)


def test_a_claimer_that_loses_the_last_slot_takes_other_work_instead() -> None:
    enqueue(CLAIMERS, plugin="echo")  # the older jobs: every claimer picks echo first
    enqueue(CLAIMERS, plugin="stress")
    caps: dict[str, Cap | int] = {"echo": Cap(1, 8), "stress": Cap(None, 8)}
    for _ in range(ROUNDS):
        won = together(lambda n: claim(caps, f"node-{n}", slots=8))
        assert all(job is not None for job in won)  # nobody went idle with work queued
        assert sorted(job.plugin for job in won) == ["echo"] + ["stress"] * (CLAIMERS - 1)
        requeue_all()
    # An undone claim leaves no trace: one transition per claim that held.
    claimed = JobTransition.objects.filter(from_status=JobStatus.QUEUED, to_status=JobStatus.RUNNING)
    assert claimed.count() == ROUNDS * CLAIMERS


def test_a_claim_undone_inside_a_callers_transaction_leaves_the_job_as_it_was() -> None:
    """A completion claims its worker's next job in its own transaction: a claim that loses the
    race there is undone and answers None (the worker claims again on its own), and the job it
    had picked is queued as before, its retry time and last owner kept."""
    first, second = enqueue(2)
    retry_at = timezone.now() - timedelta(seconds=30)
    Job.objects.filter(pk=second).update(next_retry_at=retry_at, claimed_by="an-earlier-attempt")
    caps: dict[str, Cap | int] = {"echo": Cap(1, 8)}
    holding, done = threading.Event(), threading.Event()

    def other_node() -> None:
        try:
            with writing():
                assert claim(caps, "node-b", slots=8).id == first  # type: ignore[union-attr]
                holding.set()
                time.sleep(0.5)  # long enough for the claim below to wait behind this one
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=other_node)
    thread.start()
    assert holding.wait(30)
    with writing():
        assert claim(caps, "node-a", slots=8) is None
    thread.join(30)
    assert done.is_set()
    job = Job.objects.get(pk=second)
    assert (job.status, job.next_retry_at, job.claimed_by) == (JobStatus.QUEUED, retry_at, "an-earlier-attempt")
    assert claim(caps, "node-a", slots=8) is None  # node-b's job holds the one slot
