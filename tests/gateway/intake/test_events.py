"""The root door (gateway/intake/events.py): what a root event, a named pipeline's run and the
gateway's own `scheduler.*` events start, and what refuses a whole trigger before anything is
enqueued, in-process on the test's own transaction."""

from __future__ import annotations

import logging

import pytest

from gateway import intake
from gateway.intake import events
from ledger.models import EventContext, EventRecord, Job
from ledger.states import JobStatus
from ledger.submitters import Submitter
from pipelines.successors import MAX_CONTEXT_BYTES
from tests.support.config_dirs import ConfigDir
from tests.support.runtime import installed_runtime

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

PIPELINES = [
    {
        "name": "greet",
        "on": "order.placed",
        "steps": [{"id": "first", "uses": "probe"}, {"id": "then", "uses": "echo"}],
    },
    {"name": "tell", "on": "order.placed", "steps": [{"id": "say", "uses": "echo"}]},
    {"name": "elsewhere", "on": "order.cancelled", "steps": [{"id": "undo", "uses": "probe"}]},
    {
        "name": "claims",
        "on": "order.claimed",
        "steps": [{"id": "keep", "uses": "probe", "baggage": {"who": "payload.user", "blob": "payload.blob"}}],
    },
    {"name": "plain", "on": "order.claimed", "steps": [{"id": "just", "uses": "echo"}]},
    {
        "name": "fan",
        "on": "fan.out",
        "steps": [{"split": [{"id": "left", "uses": "echo"}, {"id": "right", "uses": "probe"}]}],
    },
]


@pytest.fixture
def rt(config_dir: ConfigDir):
    config_dir.extra["pipelines"] = PIPELINES
    with installed_runtime(config_dir) as holder:
        yield holder.get()


def started(job_ids: list[str]) -> dict[str | None, Job]:
    """The jobs by the pipeline of their step."""
    jobs = Job.objects.in_bulk(job_ids)
    contexts: dict[str | None, str | None] = dict(EventContext.objects.values_list("id", "pipeline_name"))
    return {contexts[job.event_context_id]: job for job in jobs.values()}


def test_a_root_event_starts_the_entry_step_of_every_pipeline_whose_on_matches(rt):
    ids = events.publish_event(rt, "order.placed", {"n": 1}, submitter=Submitter.API)
    by_pipeline = started(ids)
    assert set(by_pipeline) == {"greet", "tell"}
    assert (by_pipeline["greet"].plugin, by_pipeline["tell"].plugin) == ("probe", "echo")
    for job in by_pipeline.values():
        assert job.event is not None
        assert (job.status, job.submitted_by, job.parent_job_id, job.route_depth) == (JobStatus.QUEUED, "api", None, 1)
        assert (job.event["type"], job.event["payload"], job.event["source"]) == ("order.placed", {"n": 1}, "api")
    # One event, one id: both pipelines' roots carry the same event.
    assert by_pipeline["greet"].source_event_id == by_pipeline["tell"].source_event_id is not None


def test_an_event_no_pipeline_listens_to_starts_nothing(rt):
    assert events.publish_event(rt, "nobody.listens", {}, submitter=Submitter.CLI) == []
    assert not Job.objects.exists()


def test_a_payload_one_entry_step_cannot_claim_refuses_the_whole_trigger(rt):
    """`plain` could start, but the trigger is refused whole: its caller is there to be told."""
    with pytest.raises(intake.Refused) as refused:
        events.publish_event(rt, "order.claimed", {"blob": "b"}, submitter=Submitter.API)
    assert str(refused.value) == (
        "pipeline 'claims' step 'keep': baggage who: source payload.user is missing (claims are never skipped); "
        "nothing was enqueued"
    )
    assert refused.value.status == 400
    assert not Job.objects.exists()
    ids = events.publish_event(rt, "order.claimed", {"user": "ada", "blob": "b"}, submitter=Submitter.API)
    assert set(started(ids)) == {"claims", "plain"}


def test_a_context_over_the_cap_refuses_the_trigger_as_too_large_with_its_size(rt):
    blob = "x" * (MAX_CONTEXT_BYTES + 10)
    with pytest.raises(intake.Refused) as refused:
        events.publish_event(rt, "order.claimed", {"user": "ada", "blob": blob}, submitter=Submitter.API)
    assert refused.value.status == 413
    actual, limit = refused.value.too_large or (0, 0)
    assert actual > MAX_CONTEXT_BYTES == limit
    assert not Job.objects.exists()


def test_a_payload_the_ledger_cannot_store_is_refused_before_any_routing(rt):
    with pytest.raises(intake.Refused, match=r"payload\.note: strings must not contain NUL"):
        events.publish_event(rt, "order.placed", {"note": "a\x00b"}, submitter=Submitter.API)
    with pytest.raises(intake.Refused, match=r"payload\.note: strings must not contain NUL"):
        events.pipeline_entries(rt, "tell", {"note": "a\x00b"}, submitter=Submitter.API)
    assert not Job.objects.exists()


def test_a_named_pipeline_starts_alone_with_its_trigger_as_the_event_type(rt):
    specs = events.pipeline_entries(rt, "tell", {"n": 2}, submitter=Submitter.CLI, dedupe_key="once")
    assert [(s.plugin, s.command, s.dedupe_key) for s in specs] == [("echo", "handle", "once")]
    ids = intake.submit_ids(rt, specs)
    assert set(started(ids)) == {"tell"}  # not `greet`, which listens for the same event
    job = Job.objects.get(pk=ids[0])
    assert job.event is not None
    assert (job.event["type"], job.payload, job.submitted_by) == ("order.placed", {"n": 2}, "cli")


def test_a_split_entry_starts_one_root_job_per_branch(rt):
    specs = events.pipeline_entries(rt, "fan", {}, submitter=Submitter.API)
    assert sorted(s.plugin for s in specs) == ["echo", "probe"]


def test_the_gateways_own_events_are_recorded_and_start_what_listens_as_system(rt, caplog, monkeypatch):
    """A listener whose entry cannot start on the payload is logged and left out; the others start."""
    announced = [
        {"type": "order.claimed", "payload": {"blob": "b"}},  # `claims` cannot start, so the trigger is refused
        {"type": "order.placed", "payload": {"n": 3}},
        {"type": "nobody.listens", "payload": {}},
    ]
    from django.utils import timezone

    # The gateway's loggers do not propagate to the root logger, where caplog listens.
    monkeypatch.setattr(logging.getLogger("ductile"), "propagate", True)
    with caplog.at_level(logging.WARNING, logger="ductile"):
        ids = events.announce(rt, announced, source="scheduler", now=timezone.now())
    assert set(started(ids)) == {"greet", "tell"}
    assert {job.submitted_by for job in Job.objects.all()} == {"system"}
    recorded = list(EventRecord.objects.order_by("id").values_list("type", "source", "job_id"))
    assert recorded == [
        ("order.claimed", "scheduler", None),
        ("order.placed", "scheduler", None),
        ("nobody.listens", "scheduler", None),
    ]
    assert "event order.claimed started no pipeline: pipeline 'claims' step 'keep': baggage who" in caplog.text


def test_nothing_announced_records_nothing(rt):
    from django.utils import timezone

    assert events.announce(rt, [], source="scheduler", now=timezone.now()) == []
    assert not EventRecord.objects.exists()


def test_a_dry_run_shows_every_hop_and_enqueues_nothing(rt):
    starts = events.pipeline_starts(rt, "greet", {"n": 1}, source="cli")
    hops = events.preview(rt, starts)["hops"]
    assert [(hop["pipeline"], hop["step"]) for hop in hops] == [("greet", "first"), ("greet", "then")]
    assert not Job.objects.exists()


def test_a_synchronous_run_of_a_pipeline_with_two_entry_dispatches_is_refused_before_anything_runs(rt):
    with pytest.raises(events.SyncRefused, match="pipeline 'fan' starts with 2 entry dispatches"):
        events.run_synchronously(rt, "fan", {}, submitter=Submitter.API, timeout=5)
    assert not Job.objects.exists()


def test_a_synchronous_caller_waits_its_own_request_else_the_pipelines_timeout_never_past_the_cap(rt):
    pipeline = rt.pipelines.pipelines["greet"]
    assert events.sync_timeout(pipeline, None) == pipeline.timeout
    assert events.sync_timeout(pipeline, 5.0) == 5.0
    assert events.sync_timeout(pipeline, 500.0, cap=20.0) == 20.0
    assert events.sync_timeout(pipeline, None, cap=pipeline.timeout + 1) == pipeline.timeout
