"""The suite's one "run until idle" harness (tests.support.jobs.run_until_idle) is the worker daemon's own
loop: it claims every claimable job, the internal `if:` hops (`core.switch`) included, runs each
through dispatch, and stops when nothing is due (DSL reference §3.6: `if:` compiles to a switch)."""

from __future__ import annotations

import pytest

from gateway.intake.events import publish_event
from gateway.runtime import RuntimeHolder
from ledger.models import EventContext, Job, JobSpec
from ledger.states import JobStatus
from ledger.submitters import Submitter
from pipelines.dsl import SWITCH
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import run_until_idle
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

GATED = {
    "name": "gated",
    "on": "gated.start",
    "steps": [
        {"id": "gate", "uses": "echo", "if": {"path": "payload.go", "op": "eq", "value": True}},
        {"id": "after", "uses": "probe"},
    ],
}


def load(config_dir: ConfigDir) -> RuntimeHolder:
    config_dir.extra["pipelines"] = [GATED]
    holder: RuntimeHolder = load_runtime(config_dir)
    return holder


def statuses_by_step(pipeline: str) -> dict[str, tuple[str, str]]:
    contexts = {
        context_id: str(step)
        for context_id, step in EventContext.objects.filter(pipeline_name=pipeline).values_list("id", "step_id")
    }
    return {
        contexts[str(job.event_context_id)]: (job.plugin, job.status)
        for job in Job.objects.filter(event_context_id__in=list(contexts))
    }


def test_a_pipeline_whose_first_hop_is_an_if_switch_runs_to_completion(config_dir: ConfigDir) -> None:
    holder = load(config_dir)
    (root,) = publish_event(holder.get(), "gated.start", {"go": True}, submitter=Submitter.CLI)
    # The only job due is the switch: a harness that claims plugins alone would stop here.
    assert Job.objects.get(id=root).plugin == SWITCH
    assert run_until_idle(holder) == 3
    assert statuses_by_step("gated") == {
        "gate__switch": (SWITCH, JobStatus.SUCCEEDED),
        "gate": ("echo", JobStatus.SUCCEEDED),
        "after": ("probe", JobStatus.SUCCEEDED),
    }
    assert not Job.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).exists()


def test_a_false_if_bypasses_its_step_and_the_rest_still_runs(config_dir: ConfigDir) -> None:
    holder = load(config_dir)
    publish_event(holder.get(), "gated.start", {"go": False}, submitter=Submitter.CLI)
    assert run_until_idle(holder) == 2
    assert statuses_by_step("gated") == {
        "gate__switch": (SWITCH, JobStatus.SUCCEEDED),
        "after": ("probe", JobStatus.SUCCEEDED),
    }


def test_a_retry_due_later_is_left_queued_as_a_worker_leaves_it(config_dir: ConfigDir) -> None:
    holder = load(config_dir)
    spec = JobSpec("stress", "poll", Submitter.CLI, payload={"mode": "error"}, max_attempts=3)
    job_id = Job.objects.enqueue(spec, default_dedupe_ttl=60).job_id
    assert run_until_idle(holder) == 1
    job = Job.objects.get(id=job_id)
    assert (job.status, job.attempt) == (JobStatus.QUEUED, 2) and job.next_retry_at is not None


def test_a_queue_that_never_goes_idle_fails_the_test(config_dir: ConfigDir) -> None:
    holder = load(config_dir)
    for n in range(3):
        Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI, payload={"n": n}), default_dedupe_ttl=60)
    with pytest.raises(AssertionError, match="not idle after 2 jobs"):
        run_until_idle(holder, limit=2)


def test_a_worker_group_runs_the_if_switches_of_its_plugins_pipelines(config_dir: ConfigDir) -> None:
    """A group (`runworkers --plugins echo,probe`, or `--group`) claims the pipelines' core hops too:
    before, its only due job was the switch, which it never claimed, and the pipeline waited."""
    holder = load(config_dir)
    publish_event(holder.get(), "gated.start", {"go": True}, submitter=Submitter.CLI)
    assert run_until_idle(holder, plugins={"echo", "probe"}) == 3
    assert statuses_by_step("gated")["after"] == ("probe", JobStatus.SUCCEEDED)
