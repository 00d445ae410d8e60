"""`pipeline dry-run`'s walk (pipelines.simulate): pure, the real successors underneath."""

from __future__ import annotations

from gateway.config.durations import parse_duration
from pipelines.dsl import compile_pipelines
from pipelines.routes import RouteRule, RoutingTable
from pipelines.simulate import MAX_HOPS, dry_run
from pipelines.successors import step_successor

PLUGINS = {"probe": ["handle"], "echo": ["handle"], "notify": ["handle"]}


def walk(pipelines, name, payload, routes=(), config=None):
    compiled = compile_pipelines(pipelines, PLUGINS, parse_duration, relay_targets=("lab",))
    pipeline = compiled.pipelines[name]
    event = {"type": pipeline.trigger, "payload": payload}
    starts = [step_successor(pipeline, node, event, {}, 1) for node in pipeline.entries]
    return dry_run(
        starts,
        routes=RoutingTable.compile(routes),
        pipelines=compiled,
        config_of=lambda plugin: (config or {}).get(plugin, {}),
    )


def test_a_switch_on_trigger_data_is_decided_and_one_on_plugin_output_walks_both_ways():
    pipelines = [
        {
            "name": "p",
            "on": "p.start",
            "steps": [
                {"id": "gate1", "uses": "probe", "if": {"path": "payload.n", "op": "gt", "value": 1}},
                {"id": "gate2", "uses": "echo", "if": {"path": "payload.result", "op": "eq", "value": "x"}},
                {"id": "last", "uses": "notify"},
            ],
        }
    ]
    hops, cut = walk(pipelines, "p", {"n": 5})
    assert not cut
    steps = [(h.step, h.decision, h.parent) for h in hops]
    # gate1 decided true from the trigger's payload; gate2 reads what probe returns: unknown, so
    # both its true branch (echo) and its false bypass (straight to last) are shown.
    assert steps[:3] == [("gate1__switch", "true", None), ("gate1", None, 0), ("gate2__switch", "unknown", 1)]
    assert sorted((h.step, h.parent) for h in hops[3:]) == [("gate2", 2), ("last", 2), ("last", 3)]


def test_config_of_the_gated_plugin_decides_a_config_condition():
    pipelines = [
        {
            "name": "p",
            "on": "p.start",
            "steps": [{"uses": "echo", "if": {"path": "config.loud", "op": "eq", "value": True}}],
        }
    ]
    assert [h.decision for h in walk(pipelines, "p", {}, config={"echo": {"loud": True}})[0]][:1] == ["true"]
    assert [h.plugin for h in walk(pipelines, "p", {}, config={"echo": {"loud": False}})[0]] == ["core.switch"]


def test_with_placeholders_downstream_and_a_hard_stop_at_the_entry():
    pipelines = [
        {
            "name": "p",
            "on": "p.start",
            "steps": [
                {"id": "a", "uses": "probe", "with": {"x": "{payload.x}"}},
                {"id": "b", "uses": "echo", "with": {"m": "got {payload.answer}", "k": "{payload.answer}"}},
            ],
        }
    ]
    hops, _ = walk(pipelines, "p", {"x": 1})
    assert hops[1].payload["m"] == "got <from upstream output: payload.answer>"
    assert hops[1].refusal is None
    hops, _ = walk(pipelines, "p", {})
    assert len(hops) == 1 and hops[0].refusal.startswith("preflight: with.x: {payload.x} is missing")


def test_a_relay_step_shows_what_it_would_send_or_why_it_would_stop():
    relay = {
        "to": "lab",
        "event": "backup.ready",
        "with": {"id": "payload.archive"},
        "dedupe_key": "{payload.archive}",
        "baggage": {"trace_id": "payload.trace"},
    }
    pipelines = [
        {"name": "p", "on": "p.start", "steps": [{"id": "out", "relay": relay}, {"id": "then", "uses": "probe"}]},
        {"name": "q", "on": "q.start", "steps": [{"id": "make", "uses": "echo"}, {"id": "out", "relay": relay}]},
    ]
    hops, _ = walk(pipelines, "p", {"archive": "a-1", "trace": "t-9"})
    assert [h.step for h in hops] == ["out", "then"]
    assert hops[0].relay == {
        "to": "lab",
        "event": "backup.ready",
        "payload": {"id": "a-1"},
        "dedupe_key": "a-1",
        "baggage": {"trace_id": "t-9"},
    }
    # Straight from the trigger a missing path stops it, as the real step would stop.
    hops, _ = walk(pipelines, "p", {"archive": "a-1"})
    assert [h.step for h in hops] == ["out"] and "source payload.trace is missing" in hops[0].refusal
    # After a plugin, its output may supply the path: unknown, not a stop.
    hops, _ = walk(pipelines, "q", {})
    assert hops[1].refusal is None and "payload.archive" in hops[1].relay["unknown"]


def test_routes_from_a_step_are_shown_and_a_runaway_walk_is_cut():
    pipelines = [{"name": "p", "on": "p.start", "steps": [{"id": "a", "uses": "probe"}]}]
    routes = [RouteRule("probe", "ductile.step.succeeded", "notify")]
    hops, _ = walk(pipelines, "p", {}, routes=routes)
    assert [(h.plugin, h.pipeline, h.parent) for h in hops] == [("probe", "p", None), ("notify", None, 0)]
    # A pipeline that restarts itself on every step is stopped by the depth guard well before the cap.
    loop = [{"name": "l", "on": "ductile.step.succeeded", "steps": [{"uses": "probe"}]}]
    hops, cut = walk(loop, "l", {})
    assert hops[-1].refusal and "route depth 21 exceeds the limit of 20" in hops[-1].refusal
    assert not cut and len(hops) < MAX_HOPS
