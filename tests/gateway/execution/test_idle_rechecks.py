"""An idle worker pool re-checks the database from one thread at a time (gateway.execution.workers,
`_idle_wait`): every wake-up of an idle daemon costs CPU, and what the timed look is for (a retry
time that came due, a lost poke) needs one look, not one per thread. The look passes to another
idle thread when the looking one takes a job, so a long job never stops the timed looks."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from gateway.execution import workers
from gateway.execution.workers import WorkerDaemon
from ledger.models import Job, JobSpec
from ledger.models.jobs import JobQuerySet, QueueLook
from ledger.submitters import Submitter
from tests.support.config_dirs import ConfigDir
from tests.support.runtime import load_runtime

# Real commits: the worker daemon's threads claim on connections of their own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RECHECK = 0.05


def watch_looks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    """(moment, thread) of every read-only look an idle thread takes."""
    looks: list[tuple[float, int]] = []
    real = JobQuerySet.look

    def look(self: JobQuerySet, *args: object, **kwargs: object) -> QueueLook:
        looks.append((time.monotonic(), threading.get_ident()))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(JobQuerySet, "look", look)
    return looks


def start_pool(daemon: WorkerDaemon, threads: int) -> list[threading.Thread]:
    pool = [threading.Thread(target=daemon.work, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    return pool


def stop_pool(daemon: WorkerDaemon, pool: list[threading.Thread]) -> None:
    daemon.stop()
    for thread in pool:
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_idle_threads_re_check_the_database_one_at_a_time(config_dir: ConfigDir, monkeypatch) -> None:
    holder = load_runtime(config_dir)
    # A job waiting for its retry time: the looks stay at every RECHECK (an empty queue backs off).
    waiting = Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0).job_id
    Job.objects.filter(pk=waiting).update(next_retry_at=timezone.now() + timedelta(hours=1))
    looks = watch_looks(monkeypatch)
    daemon = WorkerDaemon(holder, threads=3, recheck=RECHECK, install_signals=False)
    pool = start_pool(daemon, 3)
    try:
        time.sleep(0.2)  # every thread has looked once and gone idle
        settled = time.monotonic()
        time.sleep(20 * RECHECK)
    finally:
        stop_pool(daemon, pool)
    timed = [thread for moment, thread in looks if moment > settled]
    # About one look per RECHECK, all from one thread; three threads each looking would be ~60.
    assert 10 <= len(timed) <= 30, len(timed)
    assert len(set(timed)) == 1


def test_an_empty_queue_is_looked_at_less_and_less_and_an_enqueue_still_wakes_the_pool(
    config_dir: ConfigDir, monkeypatch
) -> None:
    holder = load_runtime(config_dir)
    looks = watch_looks(monkeypatch)
    monkeypatch.setattr(workers, "IDLE_RECHECK_CEILING", 8 * RECHECK)
    daemon = WorkerDaemon(holder, threads=2, recheck=RECHECK, install_signals=False)
    pool = start_pool(daemon, 2)
    try:
        time.sleep(40 * RECHECK)
        gaps = [b - a for (a, _), (b, _) in itertools.pairwise(looks[2:])]  # the timed looks
        # Doubling from RECHECK to the ceiling, then there: about 8 looks in 2 s, not 40.
        assert 4 <= len(gaps) <= 12, gaps
        assert max(gaps) >= 6 * RECHECK and max(gaps) <= 8 * RECHECK + 0.15, gaps
        # An enqueue's wake-up (a poke, a NOTIFY: `wake`, which the daemon's listener calls; none
        # runs in this test) ends the long wait at once. The ceiling goes up first, so the next
        # timed look is ~10 s away and "at once" can be told from it on a loaded machine too.
        monkeypatch.setattr(workers, "IDLE_RECHECK_CEILING", 200 * RECHECK)
        settled, deadline = len(looks), time.monotonic() + 2
        while len(looks) == settled:  # the wait under way ends; the next one is the long one
            assert time.monotonic() < deadline, "no timed look within 2 s"
            time.sleep(0.01)
        started = time.monotonic()
        job = Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0).job_id
        daemon.wake()
        while Job.objects.get(pk=job).status != "succeeded":
            assert time.monotonic() - started < 40 * RECHECK, "the enqueue waited for the timed look"
            time.sleep(0.01)
        # The thread that ran it looks at RECHECK again.
        before = len(looks)
        time.sleep(1.5 * RECHECK)
        assert len(looks) > before
    finally:
        stop_pool(daemon, pool)


def test_a_retry_that_comes_due_is_run_while_the_looking_thread_is_busy(config_dir: ConfigDir) -> None:
    # The first thread to look takes the slow job; the other must take over the timed look, or the
    # retry (announced by no wake-up) would wait for the slow job to end.
    holder = load_runtime(config_dir)
    daemon = WorkerDaemon(holder, threads=2, recheck=RECHECK, install_signals=False)
    pool = start_pool(daemon, 2)
    try:
        time.sleep(0.3)  # both threads idle: one looks on the timer, the other sleeps until woken
        # Unannounced too (no listener in this test): the looking thread is the one that finds it.
        spec = JobSpec("stress", "poll", Submitter.CLI, event={"type": "t", "payload": {"sleep": 3}})
        slow = Job.objects.enqueue(spec, default_dedupe_ttl=0).job_id
        deadline = time.monotonic() + 5
        while Job.objects.get(pk=slow).status != "running":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.2)
        # Queued behind its retry time, written by hand: nothing pokes the workers about it.
        due_soon = Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0).job_id
        Job.objects.filter(pk=due_soon).update(next_retry_at=timezone.now() + timedelta(seconds=0.3))
        deadline = time.monotonic() + 2.0
        while Job.objects.get(pk=due_soon).status != "succeeded":
            assert time.monotonic() < deadline, "the retry waited for the busy thread"
            time.sleep(0.02)
        assert Job.objects.get(pk=slow).status == "running"
    finally:
        stop_pool(daemon, pool)
