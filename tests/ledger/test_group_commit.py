"""Group commit (`ledger.writes.group_commit.shared`): in a process that shares its write transactions (the API's
gunicorn workers), the writes many threads ask for at once go into one transaction on one writer
thread; each caller gets its own answer, or its own error, after the commit (issue 16)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
from ledger.writes import group_commit

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sharing() -> Iterator[None]:
    group_commit.share_transactions()
    yield
    group_commit.stop_sharing()


def enqueue() -> str:
    spec = JobSpec(plugin="echo", command="poll", submitter=Submitter.API)
    return Job.objects.enqueue(spec, default_dedupe_ttl=0).job_id


def in_one_batch(calls: list[Callable[[], object]]) -> None:
    """Run each of `calls` on a thread of its own while the writer is held, so that all of them
    wait for it together and go into its next transaction."""
    entered, gate = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        gate.wait(10)

    holder = threading.Thread(target=group_commit.shared, args=(hold,))
    holder.start()
    # Why wait: a call queued before `hold` would be taken into the writer's batch with it, and
    # never counted as waiting below.
    assert entered.wait(10)
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while (
        group_commit._writer is not None
        and group_commit._writer._calls.qsize() < len(calls)
        and time.monotonic() < deadline
    ):
        threading.Event().wait(0.01)
    gate.set()
    for thread in [holder, *threads]:
        thread.join(10)


def test_calls_waiting_together_are_committed_in_one_transaction_each_with_its_answer(sharing: None) -> None:
    seen: dict[int, Any] = {}

    def one(n: int) -> str:
        seen[n] = connection.atomic_blocks[0]  # the transaction this call runs in
        return enqueue()

    results: dict[int, str] = {}

    def record(n: int) -> None:
        results[n] = group_commit.shared(lambda: one(n))

    in_one_batch([functools.partial(record, n) for n in range(5)])

    assert sorted(results) == list(range(5)) and len(set(results.values())) == 5
    assert Job.objects.filter(pk__in=results.values()).count() == 5
    assert len({id(block) for block in seen.values()}) == 1


def test_one_callers_error_is_its_own(sharing: None) -> None:
    """Without a savepoint per call: the batch is rolled back whole and each call runs again
    alone, so the others' jobs are committed once each and the failed call's not at all."""

    def broken() -> str:
        enqueue()
        raise ValueError("this call fails")

    errors: list[BaseException] = []
    answers: list[str] = []

    def call(fn: Callable[[], str]) -> None:
        try:
            answers.append(group_commit.shared(fn))
        except ValueError as exc:
            errors.append(exc)

    in_one_batch([functools.partial(call, fn) for fn in (enqueue, broken, enqueue)])

    assert [str(e) for e in errors] == ["this call fails"]
    assert len(answers) == 2
    assert sorted(Job.objects.values_list("id", flat=True)) == sorted(answers)


class Abort(BaseException):
    """Not an Exception (as KeyboardInterrupt and SystemExit are not)."""


def test_a_call_that_raises_past_exception_reaches_its_caller_and_the_writer_carries_on(sharing: None) -> None:
    def aborting() -> str:
        enqueue()
        raise Abort("stop")

    with pytest.raises(Abort):
        group_commit.shared(aborting)
    assert Job.objects.count() == 0
    answer: list[str] = []
    worker = threading.Thread(target=lambda: answer.append(group_commit.shared(enqueue)))
    worker.start()
    worker.join(10)
    assert len(answer) == 1 and Job.objects.filter(pk=answer[0]).exists()


# A deferred constraint trigger runs inside the COMMIT: this one ends its own backend there, as a
# server going down under a committing client does. The client's COMMIT is never answered.
ENDS_ITS_COMMIT = """
CREATE TABLE ends_its_commit (n integer);
CREATE FUNCTION end_this_backend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER end_at_commit AFTER INSERT ON ends_its_commit DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION end_this_backend();
"""


def test_a_commit_whose_connection_is_lost_is_reported_unknown_and_not_run_again(sharing: None) -> None:
    """Whether a COMMIT the server never answered was made, nobody on this side can know: the
    batch's calls are not run again (that could record them twice), and each caller is told."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: a server that ends a connection during its COMMIT")
    with connection.cursor() as cursor:
        cursor.execute(ENDS_ITS_COMMIT)

    def ending() -> str:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO ends_its_commit VALUES (1)")
        return enqueue()

    errors: list[BaseException] = []

    def call(fn: Callable[[], str]) -> None:
        try:
            group_commit.shared(fn)
        except BaseException as exc:
            errors.append(exc)

    in_one_batch([functools.partial(call, fn) for fn in (enqueue, ending, enqueue)])

    assert len(errors) == 3 and all(isinstance(e, group_commit.CommitUnknown) for e in errors), errors
    assert Job.objects.count() == 0  # not committed here; run again, the two enqueues would have been
    assert Job.objects.filter(pk=group_commit.shared(enqueue)).exists()  # the writer carries on, on a new connection
