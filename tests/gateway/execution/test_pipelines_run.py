"""Pipelines executed end to end with real plugin processes: chains with baggage and `with:`,
split, call, `if:` true and false, from_plugin, depth exhaustion (DSL reference §2-§4)."""

from __future__ import annotations

import json

import pytest

from ledger.models import Job, JobLog, JobSpec, JobTransition
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.jobs import jobs_by_step, run_until_idle
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def load(config_dir, pipelines, **plugins):
    config_dir.plugins.update(plugins)
    config_dir.extra["pipelines"] = pipelines
    return load_runtime(config_dir)


def publish(holder, event_type, payload):
    from gateway.intake.events import publish_event

    return publish_event(holder.get(), event_type, payload, submitter=Submitter.CLI)


def request_of(job):
    result = JobLog.objects.filter(job_id=job.id).latest("completed_at").result
    assert result is not None, f"job {job.id} logged no result"
    return json.loads(result)["result"]["request"]


def steps(pipeline):
    return jobs_by_step(pipeline)


def test_three_step_chain_with_baggage_and_with(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "chain",
                "on": "chain.start",
                "steps": [
                    {"id": "first", "uses": "probe", "baggage": {"origin.user": "payload.user"}},
                    {
                        "id": "second",
                        "uses": "echo",
                        "with": {"message": "hello {context.origin.user}", "n": "{payload.n}"},
                    },
                    {"id": "third", "uses": "probe", "baggage": {"echo.said": "payload.result"}},
                ],
            }
        ],
    )
    publish(holder, "chain.start", {"user": "ada", "n": 7})
    run_until_idle(holder)
    by_step = steps("chain")
    assert set(by_step) == {"first", "second", "third"}
    assert all(j.status == JobStatus.SUCCEEDED for j in by_step.values())
    third_request = request_of(by_step["third"])
    assert third_request["context"]["origin"] == {"user": "ada"}
    assert third_request["context"]["echo"] == {"said": "Echoed: hello ada"}
    assert third_request["context"]["ductile_pipeline"] == "chain"
    assert by_step["second"].parent_job_id == by_step["first"].id
    assert by_step["third"].route_depth == 3


def test_a_pipeline_steps_timing_names_its_step(config_dir):
    """New-11: job_stopwatch.step_name was NULL for every row, so timings could not be grouped by step."""
    from gateway.reports import job_detail
    from ledger.models import JobStopwatch

    holder = load(
        config_dir,
        [
            {
                "name": "timed",
                "on": "t.start",
                "steps": [{"id": "fetch", "uses": "probe"}, {"id": "say", "uses": "echo"}],
            }
        ],
    )
    publish(holder, "t.start", {})
    run_until_idle(holder)
    by_step = steps("timed")
    for step in ("fetch", "say"):
        (row,) = JobStopwatch.objects.filter(job_id=by_step[step].id)
        assert row.step_name == step
        assert [s["step_name"] for s in job_detail(by_step[step])["stopwatch"]] == [step]  # `job inspect --json`


def test_with_keeps_the_type_of_a_pure_reference(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "typed",
                "on": "t.start",
                "steps": [{"id": "only", "uses": "probe", "with": {"count": "{payload.n}", "label": "n={payload.n}"}}],
            }
        ],
    )
    publish(holder, "t.start", {"n": 7})
    run_until_idle(holder)
    payload = request_of(steps("typed")["only"])["event"]["payload"]
    assert payload["count"] == 7 and payload["label"] == "n=7"


def test_with_missing_path_fails_the_job_at_preflight(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "broken",
                "on": "b.start",
                "steps": [{"id": "only", "uses": "probe", "with": {"x": "{payload.nope}"}}],
            }
        ],
    )
    publish(holder, "b.start", {})
    run_until_idle(holder)
    job = steps("broken")["only"]
    assert job.status == JobStatus.FAILED and "{payload.nope} is missing" in job.last_error


def test_missing_baggage_source_stops_the_chain_with_a_reason(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "claims",
                "on": "c.start",
                "steps": [
                    {"id": "a", "uses": "probe"},
                    {"id": "b", "uses": "probe", "baggage": {"x.y": "payload.absent"}},
                ],
            }
        ],
    )
    publish(holder, "c.start", {})
    run_until_idle(holder)
    job = steps("claims")["b"]
    # Item 81: 003 "Missing source paths fail the job": `failed` (never run), no longer `dead`.
    assert job.status == JobStatus.FAILED and "payload.absent is missing" in job.last_error
    assert job.started_at is None and JobLog.objects.filter(job_id=job.id).count() == 0
    path = list(JobTransition.objects.filter(job_id=job.id).values_list("from_status", "to_status"))
    assert path == [(None, "queued"), ("queued", "failed")]


def test_inherited_baggage_cannot_be_rewritten(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "immutable",
                "on": "i.start",
                "steps": [
                    {"id": "a", "uses": "stress", "baggage": {"k": "payload.v"}, "with": {"v": "changed"}},
                    {"id": "b", "uses": "probe", "baggage": {"k": "payload.v"}},
                ],
            }
        ],
    )
    publish(holder, "i.start", {"v": "original"})
    run_until_idle(holder)
    job = steps("immutable")["b"]
    assert job.status == JobStatus.FAILED and "cannot be rewritten" in job.last_error


def test_split_runs_every_branch_and_they_share_baggage(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "fan",
                "on": "f.start",
                "steps": [
                    {"id": "root", "uses": "probe", "baggage": {"shared.id": "payload.id"}},
                    {
                        "split": [
                            {"id": "left", "uses": "probe"},
                            {"steps": [{"id": "right1", "uses": "echo"}, {"id": "right2", "uses": "probe"}]},
                        ]
                    },
                ],
            }
        ],
    )
    publish(holder, "f.start", {"id": 42})
    run_until_idle(holder)
    by_step = steps("fan")
    assert {"root", "left", "right1", "right2"} <= set(by_step)
    assert request_of(by_step["left"])["context"]["shared"] == {"id": 42}
    assert request_of(by_step["right2"])["context"]["shared"] == {"id": 42}


def test_a_split_at_the_entry_hangs_its_branches_from_one_root_context(config_dir):
    """Item 88: each branch of an entry split wrote its own parentless event_context row; the
    instance now has one root row (step "") that both branches' rows point to."""
    from ledger.models import EventContext

    holder = load(
        config_dir,
        [
            {
                "name": "forked",
                "on": "fk.start",
                "steps": [{"split": [{"id": "l", "uses": "probe"}, {"id": "r", "uses": "echo"}]}],
            }
        ],
    )
    publish(holder, "fk.start", {"k": 1})
    run_until_idle(holder)
    (root,) = EventContext.objects.filter(pipeline_name="forked", step_id="")
    assert root.parent_id is None
    assert root.accumulated_json["ductile"]["pipeline_instance_id"]
    branches = {c.step_id: c for c in EventContext.objects.filter(pipeline_name="forked").exclude(pk=root.pk)}
    assert set(branches) == {"l", "r"} and {c.parent_id for c in branches.values()} == {root.id}
    by_step = steps("forked")
    assert {by_step["l"].status, by_step["r"].status} == {JobStatus.SUCCEEDED}


def test_call_runs_the_named_pipeline_with_the_current_baggage(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "outer",
                "on": "o.start",
                "steps": [
                    {"id": "a", "uses": "probe", "baggage": {"trace.id": "payload.trace"}},
                    {"id": "inner", "call": "reusable"},
                    {"id": "z", "uses": "probe"},
                ],
            },
            {"name": "reusable", "on": "never.fired", "steps": [{"id": "r", "uses": "probe"}]},
        ],
    )
    publish(holder, "o.start", {"trace": "t-1"})
    run_until_idle(holder)
    by_step = steps("outer")
    assert {"a", "inner/r", "z"} <= set(by_step)
    assert request_of(by_step["inner/r"])["context"]["trace"] == {"id": "t-1"}
    assert by_step["z"].parent_job_id == by_step["inner/r"].id


@pytest.mark.parametrize(("value", "ran"), [(5, True), (1, False)])
def test_step_if_compiles_to_a_visible_switch_and_bypasses_on_false(config_dir, value, ran):
    holder = load(
        config_dir,
        [
            {
                "name": "gated",
                "on": "g.start",
                "steps": [
                    {"id": "gate", "uses": "echo", "if": {"path": "payload.n", "op": "gte", "value": 3}},
                    {"id": "after", "uses": "probe"},
                ],
            }
        ],
    )
    publish(holder, "g.start", {"n": value})
    run_until_idle(holder)
    by_step = steps("gated")
    switch = by_step["gate__switch"]
    assert switch.plugin == "core.switch" and switch.status == JobStatus.SUCCEEDED
    logged = JobLog.objects.get(job_id=switch.id).result
    assert logged is not None
    decision = json.loads(logged)["events"][0]["type"]
    assert decision == ("ductile.switch.true" if ran else "ductile.switch.false")
    assert ("gate" in by_step) is ran
    assert by_step["after"].status == JobStatus.SUCCEEDED  # downstream steps still run


def test_pipeline_level_if_false_dispatches_nothing(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "quiet",
                "on": "q.start",
                "if": {"path": "payload.go", "op": "eq", "value": True},
                "steps": [{"id": "only", "uses": "probe"}],
            }
        ],
    )
    publish(holder, "q.start", {"go": False})
    assert Job.objects.count() == 0
    publish(holder, "q.start", {"go": True})
    run_until_idle(holder)
    assert steps("quiet")["only"].status == JobStatus.SUCCEEDED


def test_from_plugin_matches_only_events_of_that_plugin(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "from-stress",
                "on": "stress.event",
                "from_plugin": "stress",
                "steps": [{"id": "s", "uses": "probe"}],
            },
            {"name": "from-echo", "on": "stress.event", "from_plugin": "echo", "steps": [{"id": "e", "uses": "probe"}]},
        ],
    )
    Job.objects.enqueue(JobSpec("stress", "poll", Submitter.CLI, payload={"emit": 1}), default_dedupe_ttl=60)
    run_until_idle(holder)
    assert "s" in steps("from-stress") and steps("from-echo") == {}
    publish(holder, "stress.event", {})  # no source plugin: a from_plugin pipeline never matches
    assert len(steps("from-stress")) == 1


def test_emitted_events_start_other_pipelines(config_dir):
    holder = load(
        config_dir,
        [
            {"name": "producer", "on": "p.start", "steps": [{"id": "emit", "uses": "stress", "with": {"emit": 2}}]},
            {"name": "consumer", "on": "stress.event", "steps": [{"id": "c", "uses": "probe"}]},
        ],
    )
    publish(holder, "p.start", {})
    run_until_idle(holder)
    assert Job.objects.filter(plugin="probe", status=JobStatus.SUCCEEDED).count() == 2


def test_depth_exhaustion_stops_the_chain_with_a_clear_error(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "loop",
                "on": "stress.event",
                "max_depth": 3,
                "steps": [{"id": "again", "uses": "stress", "with": {"emit": 1}}],
            }
        ],
    )
    publish(holder, "stress.event", {})
    run_until_idle(holder)
    dead = Job.objects.get(status=JobStatus.DEAD)
    assert dead.last_error is not None and "route depth 4 exceeds the limit of 3" in dead.last_error


def test_failure_hook_starts_a_fresh_root_with_the_failure_fields(config_dir):
    config_dir.plugins["stress"]["notify_on_complete"] = True
    holder = load(
        config_dir,
        [
            {
                "name": "on-failure",
                "on-hook": "job.failed",
                "from_plugin": "stress",
                "steps": [{"id": "notify", "uses": "probe"}],
            }
        ],
    )
    failing = Job.objects.enqueue(
        JobSpec("stress", "poll", Submitter.CLI, payload={"mode": "retry_false"}, max_attempts=1), default_dedupe_ttl=60
    ).job_id
    run_until_idle(holder)
    hook_job = steps("on-failure")["notify"]
    assert hook_job.parent_job_id == failing and hook_job.submitted_by == "hook"
    payload = request_of(hook_job)["event"]["payload"]
    assert payload["status"] == "failed" and payload["plugin"] == "stress" and payload["attempt"] == 1
    assert payload["error"] == "permanent input error" and payload["message"] == payload["text"]
    assert "duration_ms" in payload
    context = request_of(hook_job)["context"]
    assert {k: v for k, v in context.items() if not k.startswith("ductile")} == {}  # nothing inherited
    assert context["ductile"]["pipeline"] == "on-failure" and context["ductile"]["route_depth"] == 1


def test_hooks_need_the_opt_in_and_plugin_events_named_like_signals_do_not_fire_them(config_dir):
    holder = load(
        config_dir,
        [
            {
                "name": "on-complete",
                "on-hook": "job.completed",
                "steps": [{"id": "n", "uses": "probe"}],
            }
        ],
    )
    Job.objects.enqueue(
        JobSpec("stress", "poll", Submitter.CLI, payload={"emit": 1, "event_type": "job.completed"}),
        default_dedupe_ttl=60,
    )
    run_until_idle(holder)
    assert steps("on-complete") == {}


def test_a_hook_cannot_trigger_itself_forever(config_dir):
    config_dir.service["hook_max_depth"] = 2
    config_dir.plugins["probe"]["notify_on_complete"] = True
    holder = load(
        config_dir,
        [
            {
                "name": "echoing-hook",
                "on-hook": "job.completed",
                "steps": [{"id": "again", "uses": "probe"}],
            }
        ],
    )
    Job.objects.enqueue(JobSpec("probe", "poll", Submitter.CLI), default_dedupe_ttl=60)
    run_until_idle(holder)
    assert Job.objects.filter(plugin="probe").count() == 3  # the root plus two generations of hooks


def test_hook_max_depth_0_means_the_default_depth_not_no_hooks(config_dir):
    """Item 95: `hook_max_depth: 0` started no hook at all; the original reserves 0 for its default, 4."""
    config_dir.service["hook_max_depth"] = 0
    config_dir.plugins["probe"]["notify_on_complete"] = True
    holder = load(config_dir, [{"name": "again", "on-hook": "job.completed", "steps": [{"id": "a", "uses": "probe"}]}])
    assert holder.get().config.service.hook_max_depth == 4
    Job.objects.enqueue(JobSpec("probe", "poll", Submitter.CLI), default_dedupe_ttl=60)
    run_until_idle(holder)
    assert Job.objects.filter(plugin="probe").count() == 5  # the root plus four generations of hooks


def test_every_job_records_a_preflight_event_and_emitted_events_are_logged(config_dir):
    from ledger.models import EventRecord

    holder = load(config_dir, [])
    ok = Job.objects.enqueue(
        JobSpec("stress", "poll", Submitter.CLI, payload={"emit": 2}), default_dedupe_ttl=60
    ).job_id
    bad = Job.objects.enqueue(JobSpec("stress", "nope", Submitter.CLI), default_dedupe_ttl=60).job_id
    run_until_idle(holder)
    pre = {e.job_id: e.payload for e in EventRecord.objects.filter(type="job.preflight")}
    assert pre[ok]["decision"] == "run" and pre[bad]["decision"] == "fail" and "no command" in pre[bad]["reason"]
    assert EventRecord.objects.filter(job_id=ok, type="stress.event").count() == 2
