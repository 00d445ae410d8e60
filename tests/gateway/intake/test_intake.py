"""The intake itself (gateway/intake/__init__.py): what it takes and refuses for each producer, the
defaults it applies (the target's retry budget, the config's dedupe window), and what it
enqueues, in-process on the test's own transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from gateway import intake
from ledger.models import Job, JobSpec, JobTransition
from ledger.states import ActionRefused, JobStatus
from ledger.storable import NOT_STORABLE
from ledger.submitters import Submitter
from tests.support.config_dirs import ConfigDir
from tests.support.runtime import installed_runtime

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def rt(config_dir: ConfigDir):
    config_dir.service["dedupe_ttl"] = "60s"
    config_dir.plugins["off"] = {"enabled": False, "uses": "echo", "config": {}}
    config_dir.plugins["ghost"] = {"uses": "no-such-plugin", "config": {}}
    config_dir.plugins["echo"]["retry"] = {"max_attempts": 3}
    with installed_runtime(config_dir) as holder:
        yield holder.get()


def finish(job_id: str, *, ago: float) -> None:
    """Mark a queued job succeeded `ago` seconds ago (what a worker records), without a plugin run."""
    done = timezone.now() - timedelta(seconds=ago)
    Job.objects.filter(pk=job_id).update(status=JobStatus.SUCCEEDED, completed_at=done)


# -- the target ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plugin", "command", "words"),
    [
        ("nope", "poll", "plugin 'nope' does not exist: the configured plugins are echo, probe, py-greet, stress"),
        ("off", "poll", "plugin 'off' cannot run: it is disabled (enabled: false)"),
        ("ghost", "poll", "plugin 'ghost' cannot run: no plugin named 'no-such-plugin' found in plugin roots"),
        (
            "fetch",
            "poll",
            "plugin 'fetch' cannot run: it is not configured (found in plugin_roots; add it under plugins:)",
        ),
        ("echo", "nope", "plugin 'echo' has no command 'nope' (it has: poll, handle, health)"),
    ],
)
def test_a_target_that_cannot_run_is_refused_as_not_found_in_one_message_and_nothing_is_enqueued(
    rt, plugin, command, words
):
    assert (intake.refusal(rt, plugin, command) or "").startswith(words)
    with pytest.raises(intake.Refused) as refused:
        intake.job(rt, Submitter.API, plugin, command, {})
    assert str(refused.value).startswith(words)
    assert (refused.value.status, refused.value.body()) == (404, {"error": str(refused.value)})
    assert not Job.objects.exists()


def test_a_runnable_target_has_no_refusal(rt):
    assert intake.refusal(rt, "echo", "poll") is None
    assert intake.resolve(rt, "echo", "poll") is rt.registry.instances["echo"]


def test_a_refusal_for_a_missing_plugin_lists_the_first_twenty_configured_and_counts_the_rest(config_dir):
    config_dir.plugins = {f"e{n:02}": {"uses": "echo", "config": {"message": "hi"}} for n in range(23)}
    with installed_runtime(config_dir) as holder:
        reason = intake.refusal(holder.get(), "nope", "poll")
    shown = ", ".join(f"e{n:02}" for n in range(intake.SHOWN_PLUGINS))
    assert reason == f"plugin 'nope' does not exist: the configured plugins are {shown} and 3 more"


# -- what a producer sends -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "dedupe_key", "message"),
    [
        ({"a": ["ok", "x\x00y"]}, None, f"payload.a[1]: strings {NOT_STORABLE}"),
        ({"k\ud800": 1}, None, f"payload: keys {NOT_STORABLE}"),
        ({}, 42, "dedupe_key: must be a string"),
        ({}, "k" * (intake.DEDUPE_KEY_MAX + 1), f"dedupe_key: must be at most {intake.DEDUPE_KEY_MAX} characters"),
        ({}, "key\x00", f"dedupe_key: strings {NOT_STORABLE}"),
    ],
)
def test_what_the_ledger_cannot_store_is_refused_as_bad_input_naming_where(rt, payload, dedupe_key, message):
    with pytest.raises(intake.Refused) as refused:
        intake.job(rt, Submitter.API, "echo", "poll", payload, dedupe_key=dedupe_key)
    assert str(refused.value) == message
    assert refused.value.status == 400
    assert not Job.objects.exists()


def test_a_dedupe_key_of_the_longest_length_is_taken(rt):
    spec = intake.job(rt, Submitter.API, "echo", "poll", {}, dedupe_key="k" * intake.DEDUPE_KEY_MAX)
    assert spec.dedupe_key == "k" * intake.DEDUPE_KEY_MAX


def test_a_refusal_past_the_context_cap_answers_413_with_the_sizes():
    refused = intake.Refused("too big", too_large=(300_000, 262_144))
    assert refused.status == 413
    assert refused.body() == {"error": "too big", "bytes_actual": 300_000, "bytes_limit": 262_144}


# -- the jobs each producer asks for ---------------------------------------------------------


def test_a_plugin_job_is_enqueued_with_its_submitter_and_the_plugins_retry_budget(rt):
    spec = intake.job(rt, Submitter.API, "echo", "poll", {"message": "m"}, dedupe_key="k1", actor="ada", note="why")
    stress = intake.job(rt, Submitter.CLI, "stress", "poll")
    (job_id, stress_id) = intake.submit_ids(rt, [spec, stress])
    job = Job.objects.get(pk=job_id)
    assert (job.plugin, job.command, job.submitted_by, job.payload) == ("echo", "poll", "api:ada", {"message": "m"})
    assert (job.status, job.max_attempts, job.dedupe_key, job.route_depth) == (JobStatus.QUEUED, 3, "k1", 0)
    (queued,) = JobTransition.objects.filter(job_id=job_id).values_list("to_status", "reason")
    assert queued == (JobStatus.QUEUED, "enqueued by api:ada: why")
    assert Job.objects.get(pk=stress_id).max_attempts == 1  # stress's own `retry.max_attempts`


def test_a_key_within_the_configs_dedupe_window_of_a_succeeded_job_returns_that_job(rt):
    (first,) = intake.submit(rt, [intake.job(rt, Submitter.API, "echo", "poll", {}, dedupe_key="same")])
    finish(first.job_id, ago=30)  # service.dedupe_ttl is 60s
    (again,) = intake.submit(rt, [intake.job(rt, Submitter.API, "echo", "poll", {}, dedupe_key="same")])
    assert (again.job_id, again.deduplicated, again.status) == (first.job_id, True, JobStatus.SUCCEEDED)
    # Another target's key is its own; past the window the same key is a new job.
    (other,) = intake.submit(rt, [intake.job(rt, Submitter.API, "echo", "handle", {}, dedupe_key="same")])
    later = timezone.now() + timedelta(seconds=31)
    (past,) = intake.submit(rt, [intake.job(rt, Submitter.API, "echo", "poll", {}, dedupe_key="same")], now=later)
    assert not other.deduplicated and not past.deduplicated
    assert len({first.job_id, other.job_id, past.job_id}) == 3


def test_a_schedules_run_keeps_its_key_but_is_never_deduplicated_by_the_intake(rt):
    """The scheduler applied its own policy when it admitted the run."""
    run = intake.scheduled(rt, "echo", "poll", {"n": 1}, dedupe_key="echo:poll:hourly", note="hourly")
    (first,) = intake.submit_ids(rt, [run])
    finish(first, ago=1)
    (second,) = intake.submit_ids(rt, [run])
    assert first != second
    job = Job.objects.get(pk=second)
    assert (job.submitted_by, job.dedupe_key, job.max_attempts) == ("scheduler", "echo:poll:hourly", 3)


def test_a_schedules_run_of_a_target_that_cannot_run_is_refused(rt):
    with pytest.raises(intake.Refused, match="plugin 'off' cannot run"):
        intake.scheduled(rt, "off", "poll", {}, dedupe_key="k", note="n")


def test_init_runs_once_per_fingerprint_never_retried_even_while_the_first_is_queued(rt):
    (first,) = intake.submit(rt, [intake.init(rt, "stress", "f1")])
    (twin,) = intake.submit(rt, [intake.init(rt, "stress", "f1")])
    (changed,) = intake.submit(rt, [intake.init(rt, "stress", "f2")])
    assert (twin.job_id, twin.deduplicated, twin.status) == (first.job_id, True, JobStatus.QUEUED)
    assert not changed.deduplicated and changed.job_id != first.job_id
    job = Job.objects.get(pk=first.job_id)
    assert (job.command, job.submitted_by, job.max_attempts) == ("init", "system", 1)


def test_init_of_a_plugin_without_an_init_command_is_refused(rt):
    with pytest.raises(intake.Refused, match="plugin 'echo' has no command 'init'"):
        intake.init(rt, "echo", "f1")


def test_a_replay_is_the_same_step_again_without_its_key_and_with_todays_retry_budget(rt):
    # Enqueued when echo's budget was 7; the config says 3 now.
    spec = JobSpec("echo", "poll", Submitter.API, payload={"message": "m"}, dedupe_key="k", max_attempts=7)
    (original_id,) = intake.submit_ids(rt, [spec])
    original = Job.objects.get(pk=original_id)
    with pytest.raises(ActionRefused, match=f"job {original_id} is still queued"):
        intake.replay(rt, original, Submitter.CLI)
    finish(original_id, ago=1)
    original.refresh_from_db()
    (replay_id,) = intake.submit_ids(rt, [intake.replay(rt, original, Submitter.CLI, actor="ada")])
    replayed = Job.objects.get(pk=replay_id)
    assert replay_id != original_id  # no key: the dedupe window does not swallow a replay
    assert (replayed.plugin, replayed.command, replayed.payload) == ("echo", "poll", {"message": "m"})
    assert (replayed.submitted_by, replayed.dedupe_key, replayed.max_attempts) == ("cli:ada", None, 3)
    reason = JobTransition.objects.filter(job_id=replay_id).values_list("reason", flat=True).get()
    assert reason == f"enqueued by cli:ada: replay of {original_id}"


def test_jobs_whose_admission_their_producer_decided_are_inserted_in_one_batch(rt):
    from ledger.writes.transaction import writing

    specs = [intake.scheduled(rt, "echo", "poll", {"n": n}, dedupe_key=f"k{n}", note="batch") for n in range(3)]
    with writing():
        ids = intake.submit_decided(specs, now=timezone.now())
    jobs = Job.objects.in_bulk(ids)
    assert [jobs[i].payload for i in ids] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert {j.status for j in jobs.values()} == {JobStatus.QUEUED}
