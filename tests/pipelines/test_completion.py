"""`pipelines.completion.aftermath`: what a finished job leads to, decided from plain data (issue 37:
this lived in the executor). Each case is a rule a pipeline author relies on."""

from __future__ import annotations

import itertools

from gateway.config.durations import parse_duration
from pipelines.completion import Finished, aftermath
from pipelines.dsl import STEP_SUCCEEDED, compile_pipelines
from pipelines.routes import RouteRule, RoutingTable
from pipelines.successors import Position

PLUGINS = {"fetch": ["handle"], "store": ["handle"], "alert": ["handle"], "audit": ["handle"]}
PIPELINES = compile_pipelines(
    [
        {
            "name": "ingest",
            "on": "ingest.start",
            "steps": [{"id": "get", "uses": "fetch"}, {"id": "put", "uses": "store"}],
        },
        {"name": "on_retry", "on": "job.retry_scheduled", "steps": [{"id": "page", "uses": "alert"}]},
        {"name": "on_fail", "on-hook": "job.failed", "steps": [{"id": "note", "uses": "audit"}]},
    ],
    PLUGINS,
    parse_duration,
    relay_targets=(),
)
ROUTES = RoutingTable.compile([RouteRule("fetch", "page.fetched", "audit")])


def run(finished: Finished, *, hook_max_depth: int = 4):
    ids = (f"ev{i}" for i in itertools.count())
    return aftermath(
        finished,
        routes=ROUTES,
        pipelines=PIPELINES,
        hook_max_depth=hook_max_depth,
        clock=lambda: "2026-11-28T12:00:00Z",
        new_id=lambda: next(ids),
    )


AT_GET = Position("ingest", "get", 1, {"ductile": {"pipeline": "ingest", "step": "get", "route_depth": 1}})


def test_a_step_that_succeeds_silently_moves_its_pipeline_on_with_what_it_ran_with() -> None:
    after = run(
        Finished(
            "fetch",
            AT_GET,
            event={"type": "ingest.start", "payload": {"url": "u", "filename": "f.txt"}},
            emitted=[],
            result="done",
            ran_with={"type": "ingest.start", "payload": {"url": "remapped"}},
        )
    )
    assert [(s.plugin, s.node, s.depth) for s in after.successors] == [("store", "put", 2)]
    event = after.events[0]
    assert event["type"] == STEP_SUCCEEDED and event["source"] == "fetch" and event["event_id"] == "ev0"
    # The payload it ran with and its result, plus the named field carried forward from its input.
    assert event["payload"] == {"url": "remapped", "result": "done", "filename": "f.txt"}
    assert after.successors[0].event["payload"]["ductile_upstream_plugin"] == "fetch"
    assert after.successors[0].event["payload"]["ductile_upstream_pipeline"] == "ingest"


def test_a_failed_attempt_moves_nothing_and_costs_no_stamp() -> None:
    clock_reads: list[int] = []

    def clock() -> str:
        clock_reads.append(1)
        return "t"

    after = aftermath(
        Finished("fetch", AT_GET, event={"type": "ingest.start", "payload": {}}),
        routes=ROUTES,
        pipelines=PIPELINES,
        hook_max_depth=4,
        clock=clock,
        new_id=lambda: "x",
    )
    assert after.successors == [] and after.events == [] and clock_reads == []


def test_an_announced_retry_starts_its_listeners_but_not_the_next_step() -> None:
    retry = {"type": "job.retry_scheduled", "payload": {"job_id": "j1"}}
    after = run(Finished("fetch", AT_GET, event={"type": "ingest.start", "payload": {}}, announced=[retry]))
    assert [(s.pipeline, s.node) for s in after.successors] == [("on_retry", "page")]
    assert after.successors[0].event["payload"] == {"job_id": "j1", "ductile_upstream_plugin": "fetch"}
    assert [e["type"] for e in after.events] == ["job.retry_scheduled"]


def test_a_routes_entry_follows_an_emitted_event_outside_any_pipeline() -> None:
    after = run(Finished("fetch", Position(), event={}, emitted=[{"type": "page.fetched", "payload": {"n": 1}}]))
    assert [(s.plugin, s.pipeline, s.depth) for s in after.successors] == [("audit", None, 1)]


def test_hooks_start_one_generation_deeper_and_stop_at_the_limit() -> None:
    signal = {"type": "job.failed", "source": "fetch", "event_id": "s1", "payload": {"job_id": "j1"}}
    finished = Finished("fetch", Position(), event={}, signals=[signal], hooks=True, hook_depth=1)
    after = run(finished)
    assert [(s.plugin, s.hook_depth) for s in after.successors] == [("audit", 2)]
    assert after.events == [signal]  # logged as sent, not stamped again
    # A hook's job is a fresh root: nothing says it came from a pipeline step upstream.
    assert "ductile_upstream_plugin" not in after.successors[0].event["payload"]
    stopped = run(finished, hook_max_depth=1)
    assert stopped.successors == []
    assert stopped.unstarted_hooks == ["hook on_fail not started: hook depth 1 reached service.hook_max_depth"]
    logged_only = run(Finished("fetch", Position(), event={}, signals=[signal], hooks=False))
    assert logged_only.successors == [] and logged_only.events == [signal]
