"""Queue semantics on the ledger (spec 000 §3): dedupe, FIFO with smart dequeue, retry, leases.

Runs on SQLite and, in CI's second pass, on PostgreSQL.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from ledger.caps import Cap
from ledger.models import AttemptOutcome, Job, JobSpec, JobTransition, LostJob
from ledger.models.jobs import backoff_seconds
from ledger.states import IllegalTransition, JobStatus
from ledger.submitters import Submitter

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
TTL = 86400.0


def enqueue(plugin="echo", command="poll", **kw):
    kw.setdefault("submitter", Submitter.CLI)
    return Job.objects.enqueue(JobSpec(plugin=plugin, command=command, **kw), default_dedupe_ttl=TTL)


def claim(caps=None, worker="w1", now=None) -> Any:
    return Job.objects.claim_next(worker_id=worker, caps=caps or {"echo": 2, "stress": 2}, lease_ttl=60, now=now)


def finish(job, status=JobStatus.SUCCEEDED, worker="w1", **kw):
    job.record_outcome(AttemptOutcome(status=status, **kw), worker=worker, default_dedupe_ttl=TTL)
    job.refresh_from_db()
    return job


def lease_of(job: Job) -> datetime:
    """The lease `job` holds in the ledger now (every claimed job holds one)."""
    lease = Job.objects.get(pk=job.pk).lease_until
    assert lease is not None, f"job {job.pk} holds no lease"
    return lease


def test_enqueue_records_queued_job_with_trigger_event():
    result = enqueue(payload={"a": 1})
    job = Job.objects.get(pk=result.job_id)
    assert job.status == JobStatus.QUEUED and job.attempt == 1 and job.max_attempts == 4
    assert job.event is not None
    assert job.event["payload"] == {"a": 1} and job.event["type"] == "cli.trigger" and job.event["event_id"]
    assert list(JobTransition.objects.filter(job_id=job.id).values_list("from_status", "to_status")) == [
        (None, "queued")
    ]


def test_dedupe_refuses_key_that_succeeded_within_window_and_returns_existing_id():
    first = enqueue(dedupe_key="k1")
    finish(claim())
    again = enqueue(dedupe_key="k1")
    assert again.deduplicated and again.job_id == first.job_id
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"plugin": ""}, "job plugin must be a non-empty string, got ''"),
        ({"plugin": "  "}, "job plugin must be a non-empty string"),
        ({"command": ""}, "job command must be a non-empty string"),
        ({"submitter": ""}, "job submitted_by must be one of api, "),
        ({"max_attempts": 0}, "job max_attempts must be an integer of at least 1, got 0"),
        ({"max_attempts": -2}, "got -2"),
    ],
)
def test_the_queue_refuses_a_job_without_target_submitter_or_attempts(spec, words):
    """Item 8: before, a job with an empty plugin or max_attempts 0 was stored (and never ran,
    or ran once against nothing)."""
    from ledger.models import InvalidJob

    fields = {"plugin": "echo", "command": "poll", "submitter": Submitter.CLI, **spec}
    with pytest.raises(InvalidJob, match=words):
        Job.objects.enqueue(JobSpec(**fields), default_dedupe_ttl=TTL)
    assert not Job.objects.exists()


def test_a_whitespace_dedupe_key_is_no_key():
    """Item 12: "   " was a real key, so every job sent with it after the first was dropped."""
    first = enqueue(dedupe_key="   ")
    finish(claim())
    second = enqueue(dedupe_key=" \t")
    assert not second.deduplicated and second.job_id != first.job_id
    assert Job.objects.get(pk=first.job_id).dedupe_key is None


def test_a_deduplicated_enqueue_answers_the_matched_jobs_status():
    """New-7: the answer said `queued` for a job that had succeeded."""
    first = enqueue(dedupe_key="k")
    assert first.status == JobStatus.QUEUED
    finish(claim())
    again = enqueue(dedupe_key="k")
    assert (again.job_id, again.deduplicated, again.status) == (first.job_id, True, JobStatus.SUCCEEDED)


def test_dedupe_is_per_target():
    enqueue(dedupe_key="k1")
    finish(claim())
    other_command = enqueue(command="handle", dedupe_key="k1")
    other_plugin = enqueue(plugin="stress", dedupe_key="k1")
    assert not other_command.deduplicated and not other_plugin.deduplicated


def test_dedupe_window_expires():
    past = timezone.now() - timedelta(hours=25)
    enqueue(dedupe_key="k1")
    job = claim()
    job.record_outcome(AttemptOutcome(status="succeeded"), worker="w1", default_dedupe_ttl=TTL, now=past)
    assert not enqueue(dedupe_key="k1").deduplicated


def test_without_override_a_queued_twin_does_not_block_enqueue():
    enqueue(dedupe_key="k1")
    assert not enqueue(dedupe_key="k1").deduplicated


def test_ttl_override_also_refuses_while_twin_is_queued_or_running():
    first = enqueue(dedupe_key="k1", dedupe_ttl=60)
    assert enqueue(dedupe_key="k1", dedupe_ttl=60).job_id == first.job_id
    claim()
    assert enqueue(dedupe_key="k1", dedupe_ttl=60).deduplicated


def test_claim_is_fifo():
    ids = [enqueue().job_id for _ in range(3)]
    caps = {"echo": 5}
    assert [claim(caps).id for _ in range(3)] == ids
    assert claim(caps) is None


def test_the_jobs_of_one_batch_are_claimed_in_id_order():
    """A batch (a scheduler tick, a bulk enqueue) shares its created_at; FIFO's tie-break is the id."""
    ids = sorted(enqueue().job_id for _ in range(5))
    Job.objects.filter(pk__in=ids).update(created_at=timezone.now())
    assert [claim({"echo": 9}).id for _ in range(5)] == ids


def test_claim_skips_plugin_at_parallelism_cap_without_starving_others():
    a1 = enqueue(plugin="stress").job_id
    a2 = enqueue(plugin="stress").job_id
    b = enqueue(plugin="echo").job_id
    caps = {"stress": 1, "echo": 1}
    assert claim(caps).id == a1
    assert claim(caps).id == b  # stress is at its cap: echo goes ahead of the older a2
    assert claim(caps) is None
    finish(Job.objects.get(pk=a1))
    assert claim(caps).id == a2


def test_claim_skips_jobs_waiting_for_retry():
    waiting = enqueue().job_id
    Job.objects.filter(pk=waiting).update(next_retry_at=timezone.now() + timedelta(minutes=5))
    ready = enqueue().job_id
    assert claim().id == ready
    assert claim() is None
    assert claim(now=timezone.now() + timedelta(minutes=6)).id == waiting


def test_queued_job_waits_while_same_key_same_target_runs():
    enqueue(dedupe_key="k")
    enqueue(dedupe_key="k")
    other_target = enqueue(plugin="stress", dedupe_key="k").job_id
    first = claim()
    assert claim().id == other_target  # distinct targets sharing a key still run concurrently
    assert claim() is None
    finish(first)
    assert claim().dedupe_key == "k"


def test_claim_sets_lease_and_owner():
    enqueue()
    job = claim(worker="host:1:abc")
    assert job.status == JobStatus.RUNNING and job.claimed_by == "host:1:abc"
    assert job.lease_until > timezone.now() + timedelta(seconds=50)


def test_illegal_transition_is_refused():
    enqueue()
    job = Job.objects.get()
    with pytest.raises(IllegalTransition):
        job.move(JobStatus.SUCCEEDED, "skip running", now=timezone.now())


def test_finishing_requires_the_owner():
    enqueue()
    job = claim(worker="w1")
    with pytest.raises(LostJob):
        finish(job, worker="someone-else")


def test_retryable_failure_requeues_with_backoff():
    enqueue()
    job = finish(claim(), JobStatus.FAILED, error="boom", backoff_base=30)
    assert job.status == JobStatus.QUEUED and job.attempt == 2 and job.last_error == "boom"
    delay = (job.next_retry_at - timezone.now()).total_seconds()
    assert 25 <= delay <= 61
    path = list(JobTransition.objects.filter(job_id=job.id).values_list("to_status", flat=True))
    assert path == ["queued", "running", "failed", "queued"]


def test_backoff_formula():
    rng = random.Random(1)
    for attempt, low in ((1, 30), (2, 60), (3, 120)):
        value = backoff_seconds(attempt, 30, rng)
        assert low <= value <= low + 30


def test_non_retryable_failure_stays_failed():
    enqueue()
    job = finish(claim(), JobStatus.FAILED, error="bad config", retryable=False)
    assert job.status == JobStatus.FAILED and job.attempt == 1 and job.completed_at is not None


def test_exhausted_attempts_end_dead():
    enqueue(max_attempts=2)
    job = finish(claim(), JobStatus.TIMED_OUT, error="slow")
    Job.objects.filter(pk=job.pk).update(next_retry_at=None)
    job = finish(claim(), JobStatus.FAILED, error="still failing")
    assert job.status == JobStatus.DEAD and job.attempt == 2
    path = list(JobTransition.objects.filter(job_id=job.id).values_list("to_status", flat=True))
    assert path == ["queued", "running", "timed_out", "queued", "running", "failed", "dead"]


def test_every_attempt_leaves_one_job_attempts_row_with_its_end():
    """Item 4: 000 names `job_attempts` among the fact tables; there was none. A timed-out
    attempt, a failed one lost with its worker, and a succeeded one: three rows, each written
    with its outcome, and shown by `job inspect --json`."""
    from gateway.reports import job_detail
    from ledger.models import JobAttempt

    enqueue(max_attempts=3)
    job = finish(claim(worker="w1"), JobStatus.TIMED_OUT, worker="w1", error="slow")
    Job.objects.filter(pk=job.pk).update(next_retry_at=None)
    claim(worker="w2")
    Job.objects.recover_lost(dead_workers=["w2"])
    job = finish(claim(worker="w3"), worker="w3")
    rows = list(JobAttempt.objects.filter(job_id=job.id).values_list("attempt", "status", "worker", "error"))
    assert rows == [
        (1, "timed_out", "w1", "slow"),
        (2, "failed", "w2", "worker w2 is gone (process exited)"),
        (3, "succeeded", "w3", None),
    ]
    assert all(a.started_at is not None and a.completed_at >= a.started_at for a in JobAttempt.objects.all())
    shown = job_detail(job)["job_attempts"]
    assert [(a["attempt"], a["status"], a["worker"]) for a in shown] == [r[:3] for r in rows]
    # A lost race records nothing: the attempt's row goes with its rolled-back outcome.
    enqueue()
    other = claim(worker="w1")
    Job.objects.filter(pk=other.pk).update(claimed_by="w9")
    with pytest.raises(LostJob):
        other.record_outcome(AttemptOutcome("succeeded"), worker="w1", default_dedupe_ttl=TTL)
    assert not JobAttempt.objects.filter(job_id=other.id).exists()


def test_completion_enqueues_children_in_the_same_transaction():
    enqueue()
    parent = claim()
    child = JobSpec(
        plugin="stress",
        command="handle",
        submitter=Submitter.ROUTE,
        parent_job_id=parent.id,
        source_event_id="e1",
        dedupe_key="dk",
    )
    finish(parent, children=[child])
    kid = Job.objects.get(parent_job_id=parent.id)
    assert (kid.plugin, kid.command, kid.source_event_id, kid.dedupe_key) == ("stress", "handle", "e1", "dk")


def test_lost_owner_result_is_discarded_and_children_not_written():
    enqueue()
    job = claim(worker="w1")
    Job.objects.filter(pk=job.pk).update(claimed_by="w2")
    with pytest.raises(LostJob):
        job.record_outcome(
            AttemptOutcome("succeeded", children=[JobSpec("echo", "handle", Submitter.ROUTE)]),
            worker="w1",
            default_dedupe_ttl=TTL,
        )
    assert Job.objects.count() == 1


def test_expired_lease_is_recovered_as_next_attempt():
    enqueue()
    job = claim()
    later = timezone.now() + timedelta(seconds=61)
    recovered = Job.objects.recover_lost(now=later)
    assert [j.id for j in recovered] == [job.id]
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and job.attempt == 2 and job.claimed_by is None
    assert "lease" in JobTransition.objects.filter(job_id=job.id, to_status="failed").get().reason


def test_live_lease_is_not_recovered():
    enqueue()
    claim()
    assert Job.objects.recover_lost(now=timezone.now()) == []


def test_dead_worker_jobs_recovered_at_once_and_past_max_attempts_go_dead():
    enqueue(max_attempts=1)
    job = claim(worker="gone")
    Job.objects.recover_lost(dead_workers=["gone"])
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD


def test_heartbeat_extends_only_own_leases_of_jobs_in_flight():
    for _ in range(3):
        enqueue()
    caps = {"echo": 3}
    mine, theirs, stalled = claim(caps, "w1"), claim(caps, "w2"), claim(caps, "w1")
    future = timezone.now() + timedelta(seconds=300)
    # `theirs` is named but owned by w2; `stalled` is w1's but no longer in flight there.
    assert Job.objects.heartbeat("w1", [mine.pk, theirs.pk], 600) == 1
    assert lease_of(mine) > future
    assert lease_of(theirs) < future
    assert lease_of(stalled) < future
    assert Job.objects.heartbeat("w1", [], 600) == 0


def test_cancel_queued_sends_jobs_dead_with_reason():
    doomed = enqueue(plugin="stress").job_id
    kept = enqueue(plugin="echo").job_id
    assert Job.objects.cancel_queued(["stress"], "plugin removed") == [doomed]
    assert Job.objects.get(pk=doomed).status == JobStatus.DEAD
    assert Job.objects.get(pk=doomed).last_error == "plugin removed"
    assert Job.objects.get(pk=kept).status == JobStatus.QUEUED


@pytest.mark.parametrize(
    ("status", "error", "health"), [("succeeded", None, "healthy"), ("failed", "boom", "unhealthy")]
)
def test_an_init_outcome_sets_the_plugins_health_in_its_own_transaction(status, error, health):
    """Spec 000 §5.2: init is not retried; its outcome is the plugin's health, recorded with it."""
    from ledger.models import PluginInstanceRecord

    job_id = Job.objects.enqueue(
        JobSpec("echo", "init", Submitter.SYSTEM, max_attempts=1, dedupe_key="init:echo:f1"), default_dedupe_ttl=TTL
    ).job_id
    PluginInstanceRecord.objects.init_started("echo", fingerprint="f1", job_id=job_id)
    job = Job.objects.claim_next(worker_id="w1", caps={"echo": 1}, lease_ttl=60)
    assert job is not None
    job.record_outcome(AttemptOutcome(status, error=error), worker="w1", default_dedupe_ttl=TTL)
    record = PluginInstanceRecord.objects.get(name="echo")
    assert (job.status, record.health, record.last_error) == (
        status if status == "succeeded" else "dead",
        health,
        error,
    )


@pytest.mark.parametrize(
    ("status", "retryable", "attempt", "final"),
    [
        ("succeeded", True, 1, "succeeded"),
        ("failed", False, 1, "failed"),
        ("timed_out", False, 1, "timed_out"),
        ("failed", True, 1, None),
        ("failed", True, 3, "dead"),
        ("timed_out", True, 3, "dead"),
    ],
)
def test_one_rule_decides_the_end_of_a_job(status, retryable, attempt, final):
    """The status an outcome leaves its job in for good (None: retried), as the ledger records it."""
    outcome = AttemptOutcome(status, error="x", retryable=retryable)
    assert outcome.final_status(attempt, 3) == final
    job_id = enqueue(max_attempts=3).job_id
    Job.objects.filter(pk=job_id).update(attempt=attempt)
    job = Job.objects.claim_next(worker_id="w1", caps={"echo": 1}, lease_ttl=60)
    assert job is not None
    job.record_outcome(outcome, worker="w1", default_dedupe_ttl=TTL)
    assert job.status == (final or "queued")


# -- caps across nodes and on one node (issue 38) ---------------------------------------------


def test_a_node_cap_limits_one_worker_and_leaves_the_others_their_own() -> None:
    for _ in range(4):
        enqueue()
    assert claim({"echo": Cap(None, 1)}, worker="node-a") is not None
    assert claim({"echo": Cap(None, 1)}, worker="node-a") is None  # its one slot for echo is taken
    assert claim({"echo": Cap(None, 1)}, worker="node-b") is not None
    assert claim({"echo": Cap(None, 1)}, worker="node-c") is not None


def test_the_cap_across_nodes_holds_whichever_nodes_claim() -> None:
    for _ in range(4):
        enqueue()
    caps = {"echo": Cap(2, 2)}
    assert claim(caps, worker="node-a") is not None
    assert claim(caps, worker="node-b") is not None
    assert claim(caps, worker="node-c") is None  # two running across the ledger: the cap
    assert claim(caps, worker="node-a") is None


def test_a_number_is_one_nodes_cap_as_the_spec_counts_it() -> None:
    for _ in range(3):
        enqueue()
    assert claim({"echo": 1}, worker="node-a") is not None
    assert claim({"echo": 1}, worker="node-b") is None
