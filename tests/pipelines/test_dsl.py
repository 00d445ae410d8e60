"""The pipelines DSL compiler (DSL reference §1-§3, §10): every load-time refusal, each naming the
pipeline index, step and key a user has to fix, and the compiled graph (entries, edges, switches,
split fan-out/fan-in, nested steps, inlined calls), its routes, fingerprint and Mermaid chart.
Pure: no database, no processes."""

from __future__ import annotations

import re

import pytest

from gateway.config.durations import parse_duration
from pipelines.dsl import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_TIMEOUT,
    SWITCH,
    SWITCH_FALSE,
    SWITCH_TRUE,
    PipelineErrors,
    PipelineSet,
    compile_pipelines,
)
from pipelines.successors import entry_matches
from pipelines.visualize import mermaid

PLUGINS = {
    "echo": ["handle", "poll"],
    "probe": ["handle"],
    "notify": ["handle", "send"],
    "poller": ["poll"],  # no `handle`: a bare `uses: poller` names a command it does not have
    "opaque": None,  # its manifest did not load: the name is known, its commands are not
}
GATE = {"path": "payload.n", "op": "gte", "value": 3}


def pipe(name="p", steps=None, **fields):
    return {
        "name": name,
        "on": f"{name}.start",
        "steps": [{"id": "only", "uses": "probe"}] if steps is None else steps,
        **fields,
    }


RELAY_TARGETS = ("lab",)  # the enabled instances of relay-instances.yaml


def build(*pipelines, plugins=PLUGINS) -> PipelineSet:
    return compile_pipelines(list(pipelines), plugins, parse_duration, relay_targets=RELAY_TARGETS)


def problems(*pipelines, plugins=PLUGINS) -> dict[str, str]:
    """Every problem as where -> message (each place is reported once)."""
    with pytest.raises(PipelineErrors) as caught:
        build(*pipelines, plugins=plugins)
    found = {p.where: p.message for p in caught.value.problems}
    assert len(found) == len(caught.value.problems), "a place was reported twice"
    for where, message in found.items():
        assert f"{where}: {message}" in str(caught.value)
    return found


def refused(*pipelines, plugins=PLUGINS) -> tuple[str, str]:
    """The single problem of a config with exactly one mistake."""
    found = problems(*pipelines, plugins=plugins)
    assert len(found) == 1, found
    return next(iter(found.items()))


# -- pipeline-level refusals -------------------------------------------------------------------


PIPELINE_REFUSALS = [
    ({"on": "x", "steps": [{"uses": "probe"}]}, "pipelines[1].name", "'name' is a required property"),
    ({"name": "", "on": "x", "steps": [{"uses": "probe"}]}, "pipelines[1].name", "should be non-empty"),
    ({"name": "b", "on": "x"}, "pipelines[1].steps", "'steps' is a required property"),
    (pipe("b", steps=[]), "pipelines[1].steps", "should be non-empty"),
    (pipe("b", steps={"uses": "probe"}), "pipelines[1].steps", "is not of type 'array'"),
    ({"name": "b", "steps": [{"uses": "probe"}]}, "pipelines[1].on", "needs a trigger"),
    (pipe("b", **{"on-hook": "job.failed"}), "pipelines[1].on-hook", "mutually exclusive"),
    ({"name": "b", "on-hook": "job.started", "steps": [{"uses": "probe"}]}, "pipelines[1].on-hook", "is not one of"),
    ({"name": "b", "on-hook": "", "steps": [{"uses": "probe"}]}, "pipelines[1].on-hook", "is not one of"),
    (pipe("b", from_plugin="ghost"), "pipelines[1].from_plugin", "unknown plugin 'ghost'"),
    (pipe("b", max_depth=-1), "pipelines[1].max_depth", "less than the minimum of 0"),
    (pipe("b", max_depth="5"), "pipelines[1].max_depth", "is not of type 'integer'"),
    (pipe("b", execution_mode="sometimes"), "pipelines[1].execution_mode", "is not one of ['async', 'synchronous']"),
    (pipe("b", execution_mode="sync"), "pipelines[1].execution_mode", "is not one of"),
    (pipe("b", timeout="soon"), "pipelines[1].timeout", "expected a duration"),
    (pipe("b", timeout="30 seconds"), "pipelines[1].timeout", "expected a duration"),
    (pipe("b", timeout=-5), "pipelines[1].timeout", "must not be negative"),
    (pipe("b", timeout=True), "pipelines[1].timeout", "is not of type"),
    (pipe("b", **{"if": {"path": "payload.x", "op": "nope"}}), "pipelines[1].if.op", "unknown operator 'nope'"),
    (
        pipe("b", **{"if": {"all": [GATE, {"path": "payload.x", "op": "in", "value": "x"}]}}),
        "pipelines[1].if.all[1].value",
        "in needs a list",
    ),
    (
        pipe("b", **{"if": {"not": {"path": "config.mode", "op": "eq", "value": "x"}}}),
        "pipelines[1].if.not.path",
        "'config.mode' is not a path under payload.* or context.*",
    ),
    (pipe("b", **{"if": "payload.x == 1"}), "pipelines[1].if", "is not of type 'object'"),
]


@pytest.mark.parametrize(("pipeline", "where", "words"), PIPELINE_REFUSALS)
def test_pipeline_level_refusals(pipeline, where, words):
    where_found, message = refused(pipe("a"), pipeline)  # a valid pipeline first: the index must be 1
    assert where_found == where
    assert words in message


def test_a_duplicate_name_names_the_second_definition_and_the_first():
    assert refused(pipe("a"), pipe("b"), pipe("a")) == (
        "pipelines[2].name",
        "pipeline 'a' is defined twice (first at pipelines[0])",
    )


def test_a_pipeline_that_is_not_a_mapping_is_refused():
    assert refused(pipe("a"), "b") == ("pipelines[1]", "'b' is not of type 'object'")


def test_every_valid_hook_signal_compiles():
    for signal in ("job.completed", "job.failed", "job.timed_out", "job.dead"):
        pipelines = build({"name": "h", "on-hook": signal, "steps": [{"uses": "probe"}]})
        assert pipelines.hooks(signal)[0].is_hook and pipelines.has_hooks()


def test_a_pipeline_level_if_may_read_payload_and_context_and_a_hook_may_read_payload():
    on = pipe("a", **{"if": {"all": [GATE, {"path": "context.trace.id", "op": "exists"}]}})
    hook: dict[str, object] = {
        "name": "h",
        "on-hook": "job.failed",
        "if": {"path": "payload.plugin", "op": "eq", "value": "x"},
    }
    hook["steps"] = [{"uses": "probe"}]
    compiled = build(on, hook)
    assert compiled.pipelines["a"].condition == on["if"]
    assert compiled.pipelines["h"].condition == hook["if"]


def test_a_hook_may_read_context_and_it_is_absent_at_hook_time():
    """DSL reference §2.1: hook predicates accept context.* (hooks start fresh roots, so today the
    context is empty and such a test is false, like a payload test of a missing key)."""
    hook = {
        "name": "h",
        "on-hook": "job.completed",
        "if": {"any": [{"path": "payload.plugin", "op": "eq", "value": "x"}, {"path": "context.t", "op": "exists"}]},
        "steps": [{"uses": "probe"}],
    }
    compiled = build(hook).pipelines["h"]
    assert compiled.condition == hook["if"]
    assert entry_matches(compiled, "echo", {"payload": {"plugin": "y"}}, {}) is False
    assert entry_matches(compiled, "echo", {"payload": {"plugin": "x"}}, {}) is True


# -- step-level refusals -----------------------------------------------------------------------


def steps_of(*steps):
    return pipe("a", steps=list(steps))


STEP_REFUSALS = [
    ([{"id": "x"}], "pipelines[0].steps[0]", "exactly one of uses, call, steps, split, relay (found none)"),
    ([{"uses": "probe", "call": "b"}], "pipelines[0].steps[0]", "(found uses, call)"),
    ([{"uses": "probe", "steps": [{"uses": "echo"}]}], "pipelines[0].steps[0]", "(found uses, steps)"),
    ([{"split": [{"uses": "probe"}], "steps": [{"uses": "echo"}]}], "pipelines[0].steps[0]", "(found steps, split)"),
    ([{"uses": "probe", "relay": {"to": "lab"}}], "pipelines[0].steps[0]", "(found uses, relay)"),
    ([{"uses": "probe"}, {"split": [{"uses": "probe"}, {"with": {}}]}], "pipelines[0].steps[1].split[1]", "found none"),
    ([{"steps": [{"uses": "probe"}, {"id": "n"}]}], "pipelines[0].steps[0].steps[1]", "found none"),
    ([{"steps": []}], "pipelines[0].steps[0].steps", "should be non-empty"),
    ([{"split": []}], "pipelines[0].steps[0].split", "should be non-empty"),
    (["probe"], "pipelines[0].steps[0]", "is not of type 'object'"),
    ([{"uses": ""}], "pipelines[0].steps[0].uses", "should be non-empty"),
    ([{"id": "", "uses": "probe"}], "pipelines[0].steps[0].id", "should be non-empty"),
    ([{"uses": "ghost"}], "pipelines[0].steps[0].uses", "unknown plugin or alias 'ghost'"),
    ([{"uses": "ghost.handle"}], "pipelines[0].steps[0].uses", "unknown plugin or alias 'ghost.handle'"),
    ([{"uses": "echo.nope"}], "pipelines[0].steps[0].uses", "plugin 'echo' has no command 'nope'"),
    ([{"uses": "poller"}], "pipelines[0].steps[0].uses", "plugin 'poller' has no command 'handle'"),
    ([{"uses": "probe"}, {"id": "c", "call": "ghost"}], "pipelines[0].steps[1].call", "unknown pipeline 'ghost'"),
    ([{"id": "a", "uses": "probe"}, {"id": "a", "uses": "echo"}], "pipelines[0].steps[1].id", "'a' is used twice"),
    (
        [{"id": "a", "uses": "probe"}, {"steps": [{"id": "b", "uses": "echo"}, {"id": "a", "uses": "echo"}]}],
        "pipelines[0].steps[1].steps[1].id",
        "'a' is used twice",
    ),
    (
        [{"split": [{"id": "a", "uses": "probe"}, {"id": "a", "uses": "echo"}]}],
        "pipelines[0].steps[0].split[1].id",
        "'a' is used twice",
    ),
    (
        [{"id": "a", "call": "helper"}, {"id": "a", "uses": "echo"}],
        "pipelines[0].steps[1].id",
        "'a' is used twice",
    ),
    (
        [{"id": "a", "uses": "echo"}, {"id": "a", "call": "helper"}],
        "pipelines[0].steps[1].id",
        "'a' is used twice",
    ),
    (
        [{"uses": "probe"}, {"id": "step_1", "uses": "echo"}],
        "pipelines[0].steps[1].id",
        "automatic id of an earlier step without an id",
    ),
    (
        [{"id": "gate", "uses": "probe", "if": GATE}, {"id": "gate__switch", "uses": "echo"}],
        "pipelines[0].steps[1].id",
        "already the id of an if: switch",
    ),
    (
        [{"id": "h/r", "uses": "probe"}, {"id": "h", "call": "helper"}],
        "pipelines[0].steps[1].call",
        "inlining this call makes step id 'h/r', which is already used",
    ),
    ([{"call": "helper", "with": {"x": "1"}}], "pipelines[0].steps[0].with", "with is only valid on uses steps"),
    (
        [{"call": "helper", "baggage": {"k": "payload.k"}}],
        "pipelines[0].steps[0].baggage",
        "baggage is only valid on uses steps",
    ),
    ([{"steps": [{"uses": "probe"}], "with": {}}], "pipelines[0].steps[0].with", "only valid on uses steps"),
    ([{"split": [{"uses": "probe"}], "baggage": {}}], "pipelines[0].steps[0].baggage", "only valid on uses steps"),
    ([{"uses": "probe", "with": "x"}], "pipelines[0].steps[0].with", "is not of type 'object'"),
    ([{"uses": "probe", "if": {"path": "payload.x", "op": "nope"}}], "pipelines[0].steps[0].if.op", "unknown operator"),
    (
        [
            {"uses": "probe"},
            {"uses": "echo", "if": {"all": [GATE, {"path": "payload.s", "op": "regex", "value": "("}]}},
        ],
        "pipelines[0].steps[1].if.all[1].value",
        "invalid regex",
    ),
    (
        [{"split": [{"uses": "probe"}, {"uses": "echo", "if": {"path": "payload.n", "op": "gt", "value": "3"}}]}],
        "pipelines[0].steps[0].split[1].if.value",
        "gt needs a number",
    ),
    (
        [{"steps": [{"uses": "probe"}], "if": {"any": []}}],
        "pipelines[0].steps[0].if.any",
        "non-empty list",
    ),
    (
        [{"call": "helper", "if": {"path": "body.x", "op": "exists"}}],
        "pipelines[0].steps[0].if.path",
        "is not a path under payload.* or context.* or config.*",
    ),
    (
        [{"uses": "probe", "baggage": {"1st.x": "payload.x"}}],
        "pipelines[0].steps[0].baggage.1st.x",
        "do not start with a digit",
    ),
    (
        [{"uses": "probe", "baggage": {"web..url": "payload.x"}}],
        "pipelines[0].steps[0].baggage.web..url",
        "non-empty segments",
    ),
    (
        [{"uses": "probe", "baggage": {"web.url": "config.url"}}],
        "pipelines[0].steps[0].baggage.web.url",
        "must be a payload.* or context.* path",
    ),
    (
        [{"uses": "probe", "baggage": {"from": "payload.metadata"}}],
        "pipelines[0].steps[0].baggage.namespace",
        "bulk import needs a namespace",
    ),
    (
        [{"uses": "probe", "baggage": {"from": "context.m", "namespace": "w"}}],
        "pipelines[0].steps[0].baggage.from",
        "must be payload or payload.<path>",
    ),
    (
        [{"uses": "probe", "baggage": {"namespace": "w"}}],
        "pipelines[0].steps[0].baggage.namespace",
        "only valid with `from`",
    ),
    (
        [{"uses": "probe", "with": {"message": "Build {payload.status"}}],
        "pipelines[0].steps[0].with.message",
        "unbalanced braces",
    ),
    (
        [{"uses": "probe", "with": {"token": "{config.token}"}}],
        "pipelines[0].steps[0].with.token",
        "must reference payload.* or context.*",
    ),
    (
        [{"uses": "probe"}, {"steps": [{"uses": "echo", "with": {"m": "{}"}}]}],
        "pipelines[0].steps[1].steps[0].with.m",
        "must reference payload.* or context.*",
    ),
    (
        [{"relay": {"to": "nowhere", "event": "backup.ready"}}],
        "pipelines[0].steps[0].relay.to",
        "unknown relay instance 'nowhere' (enabled in relay-instances.yaml: lab)",
    ),
    ([{"relay": {"to": "lab"}}], "pipelines[0].steps[0].relay.event", "missing 'event': the remote event type"),
    ([{"relay": {"to": "lab", "event": "Backup Ready"}}], "pipelines[0].steps[0].relay.event", "lower-case dotted"),
    ([{"relay": {"to": "lab", "event": "b.r", "tos": "x"}}], "pipelines[0].steps[0].relay.tos", "unknown key 'tos'"),
    (
        [{"relay": {"to": "lab", "event": "b.r", "with": {"token": "config.token"}}}],
        "pipelines[0].steps[0].relay.with.token",
        "must reference payload.* or context.*",
    ),
    (
        [{"relay": {"to": "lab", "event": "b.r", "dedupe_key": "{payload.id"}}],
        "pipelines[0].steps[0].relay.dedupe_key",
        "unbalanced braces",
    ),
    (
        [{"relay": {"to": "lab", "event": "b.r", "baggage": {"ductile.x": "payload.a"}}}],
        "pipelines[0].steps[0].relay.baggage.ductile.x",
        "reserved",
    ),
    (
        [{"relay": {"to": "lab", "event": "b.r"}, "with": {"a": "{payload.a}"}}],
        "pipelines[0].steps[0].with",
        "with is only valid on uses steps",
    ),
]


@pytest.mark.parametrize(("steps", "where", "words"), STEP_REFUSALS)
def test_step_level_refusals(steps, where, words):
    helper = {"name": "helper", "on": "helper.start", "steps": [{"id": "r", "uses": "probe"}]}
    where_found, message = refused(steps_of(*steps), helper)
    assert where_found == where
    assert words in message


def test_a_direct_call_cycle_is_refused_at_the_call():
    assert refused(pipe("a", steps=[{"uses": "probe"}, {"id": "again", "call": "a"}])) == (
        "pipelines[0].steps[1].call",
        "call cycle: a -> a (a pipeline may not call itself, directly or not)",
    )


def test_an_indirect_call_cycle_is_refused_at_every_call_in_it():
    found = problems(
        pipe("a", steps=[{"uses": "probe"}, {"call": "b"}]),
        pipe("b", steps=[{"steps": [{"call": "c"}]}]),
        pipe("c", steps=[{"split": [{"uses": "probe"}, {"call": "a"}]}]),
    )
    assert found == {
        "pipelines[0].steps[1].call": "call cycle: a -> b -> c -> a (a pipeline may not call itself, directly or not)",
        "pipelines[1].steps[0].steps[0].call": "call cycle: a -> b -> c -> a (a pipeline may not call itself, "
        "directly or not)",
        "pipelines[2].steps[0].split[1].call": "call cycle: a -> b -> c -> a (a pipeline may not call itself, "
        "directly or not)",
    }


def test_a_call_cycle_does_not_hide_the_other_problems():
    found = problems(
        pipe("loop", steps=[{"id": "again", "call": "loop"}]),
        pipe("bad_plugin", steps=[{"uses": "ghost"}]),
        pipe("into_loop", steps=[{"call": "loop"}, {"uses": "probe", "if": {"path": "payload.x", "op": "nope"}}]),
        pipe("bad_call", steps=[{"call": "nowhere"}]),
        pipe("fine"),
    )
    assert set(found) == {
        "pipelines[0].steps[0].call",
        "pipelines[1].steps[0].uses",
        "pipelines[2].steps[1].if.op",
        "pipelines[3].steps[0].call",
    }
    assert found["pipelines[0].steps[0].call"].startswith("call cycle: loop -> loop")


def test_a_duplicate_name_does_not_hide_the_other_problems():
    found = problems(pipe("a"), pipe("a"), pipe("b", steps=[{"uses": "echo.nope"}]))
    assert set(found) == {"pipelines[1].name", "pipelines[2].steps[0].uses"}


def test_a_broken_trigger_does_not_hide_the_steps_problems():
    found = problems({"name": "a", "steps": [{"uses": "ghost"}]})
    assert set(found) == {"pipelines[0].on", "pipelines[0].steps[0].uses"}


def test_a_called_pipelines_problem_is_reported_once_where_it_is_written():
    found = problems(
        pipe("caller", steps=[{"id": "x", "call": "callee"}, {"id": "y", "call": "callee"}]),
        pipe("callee", steps=[{"uses": "probe"}, {"uses": "ghost"}]),
    )
    assert found == {"pipelines[1].steps[1].uses": "unknown plugin or alias 'ghost'"}


def test_every_problem_is_reported_not_just_the_first():
    found = problems(
        pipe(
            "a",
            steps=[
                {"uses": "ghost"},
                {"uses": "echo", "with": {"m": "{oops"}},
                {"uses": "probe", "baggage": {"k": "nowhere"}},
                {"call": "missing"},
            ],
            from_plugin="ghost",
        )
    )
    assert set(found) == {
        "pipelines[0].from_plugin",
        "pipelines[0].steps[0].uses",
        "pipelines[0].steps[1].with.m",
        "pipelines[0].steps[2].baggage.k",
        "pipelines[0].steps[3].call",
    }


def test_problems_are_listed_in_pipeline_order():
    with pytest.raises(PipelineErrors) as caught:
        build(
            pipe("a", steps=[{"call": "b"}]),
            pipe("b", steps=[{"uses": "ghost"}]),
            pipe("c", steps=[{"uses": "ghost"}]),
        )
    assert [p.path[1] for p in caught.value.problems] == [1, 2]


# -- what compiles ---------------------------------------------------------------------------


def test_uses_names_a_plugin_alias_or_plugin_command():
    compiled = build(
        pipe(
            "a",
            steps=[
                {"id": "bare", "uses": "echo"},
                {"id": "command", "uses": "echo.poll"},
                {"id": "poll_only", "uses": "poller.poll"},
                {"id": "unknown_manifest", "uses": "opaque.anything"},
            ],
        )
    ).pipelines["a"]
    assert [(n.plugin, n.command) for n in compiled.nodes.values()] == [
        ("echo", "handle"),
        ("echo", "poll"),
        ("poller", "poll"),
        ("opaque", "anything"),
    ]


def test_a_plugin_whose_name_has_a_dot_is_used_whole():
    compiled = build(pipe("a", steps=[{"uses": "acme.tool"}]), plugins={"acme.tool": ["handle"]})
    node = next(iter(compiled.pipelines["a"].nodes.values()))
    assert (node.plugin, node.command) == ("acme.tool", "handle")


def test_pipeline_defaults_and_settings():
    compiled = build(
        pipe("plain"),
        pipe("tuned", execution_mode="synchronous", timeout="2m", max_depth=0, from_plugin="echo"),
        pipe("numeric", timeout=5),
    ).pipelines
    plain, tuned = compiled["plain"], compiled["tuned"]
    assert (plain.execution_mode, plain.timeout, plain.max_depth, plain.from_plugin) == (
        "async",
        DEFAULT_TIMEOUT,
        DEFAULT_MAX_DEPTH,
        None,
    )
    assert (tuned.execution_mode, tuned.timeout, tuned.max_depth, tuned.from_plugin) == (
        "synchronous",
        120.0,
        0,
        "echo",
    )
    assert compiled["numeric"].timeout == 5.0
    assert (plain.trigger, plain.is_hook) == ("plain.start", False)


def test_triggered_by_matches_the_event_type_exactly_and_never_hooks():
    compiled = build(
        pipe("a", on="x.done"),
        pipe("b", on="x.done"),
        pipe("c", on="x.done.more"),
        {"name": "h", "on-hook": "job.completed", "steps": [{"uses": "probe"}]},
    )
    assert [p.name for p in compiled.triggered_by("x.done")] == ["a", "b"]
    assert compiled.triggered_by("x") == [] and compiled.triggered_by("job.completed") == []
    assert [p.name for p in compiled.hooks("job.completed")] == ["h"] and compiled.hooks("job.failed") == []


def test_a_linear_chain():
    p = build(pipe("a", steps=[{"id": "one", "uses": "echo"}, {"id": "two", "uses": "probe"}, {"uses": "notify"}]))
    chain = p.pipelines["a"]
    assert chain.entries == ("one",)
    assert set(chain.nodes) == {"one", "two", "step_1"}
    assert chain.edges == {"one": ((None, "two"),), "two": ((None, "step_1"),)}
    assert chain.next_nodes("one", "anything.emitted") == ["two"]
    assert chain.next_nodes("two", "ductile.step.succeeded") == ["step_1"]
    assert chain.next_nodes("step_1", "x") == [] and chain.is_terminal("step_1", "x")


def test_a_step_if_compiles_to_a_switch_with_true_and_false_edges():
    chain = build(
        pipe(
            "a",
            steps=[
                {"id": "before", "uses": "echo"},
                {"id": "gate", "uses": "probe", "if": GATE},
                {"id": "after", "uses": "notify"},
            ],
        )
    ).pipelines["a"]
    switch = chain.nodes["gate__switch"]
    assert (switch.kind, switch.plugin, switch.condition) == ("switch", SWITCH, GATE)
    assert chain.edges["before"] == ((None, "gate__switch"),)
    assert chain.edges["gate__switch"] == ((SWITCH_TRUE, "gate"), (SWITCH_FALSE, "after"))
    assert chain.edges["gate"] == ((None, "after"),)
    assert chain.next_nodes("gate__switch", SWITCH_TRUE) == ["gate"]
    assert chain.next_nodes("gate__switch", SWITCH_FALSE) == ["after"]
    assert chain.next_nodes("gate__switch", "other.event") == []


def test_a_gated_first_step_makes_the_switch_the_entry_and_a_gated_last_step_can_end_the_run():
    chain = build(pipe("a", steps=[{"id": "first", "uses": "probe", "if": GATE}])).pipelines["a"]
    assert chain.entries == ("first__switch",)
    assert chain.next_nodes("first__switch", SWITCH_FALSE) == []
    assert chain.is_terminal("first__switch", SWITCH_FALSE)


def test_split_fans_out_and_every_branch_fans_in_to_the_next_step():
    chain = build(
        pipe(
            "a",
            steps=[
                {"id": "root", "uses": "probe"},
                {
                    "split": [
                        {"id": "left", "uses": "probe"},
                        {"steps": [{"id": "right1", "uses": "echo"}, {"id": "right2", "uses": "probe"}]},
                    ]
                },
                {"id": "join", "uses": "notify"},
            ],
        )
    ).pipelines["a"]
    assert chain.next_nodes("root", "x") == ["left", "right1"]
    assert chain.next_nodes("right1", "x") == ["right2"]
    assert chain.next_nodes("left", "x") == ["join"]
    assert chain.next_nodes("right2", "x") == ["join"]
    assert "right1" not in {target for _, target in chain.edges["left"]}


def test_a_split_first_step_has_one_entry_per_branch():
    chain = build(pipe("a", steps=[{"split": [{"id": "l", "uses": "probe"}, {"id": "r", "uses": "echo"}]}]))
    assert chain.pipelines["a"].entries == ("l", "r")


def test_a_gated_split_or_group_is_one_switch_in_front_of_all_its_entries():
    chain = build(
        pipe(
            "a",
            steps=[
                {"id": "fan", "if": GATE, "split": [{"id": "l", "uses": "probe"}, {"id": "r", "uses": "echo"}]},
                {"id": "group", "if": GATE, "steps": [{"id": "g1", "uses": "probe"}, {"id": "g2", "uses": "probe"}]},
                {"id": "end", "uses": "notify"},
            ],
        )
    ).pipelines["a"]
    assert chain.entries == ("fan__switch",)
    assert chain.next_nodes("fan__switch", SWITCH_TRUE) == ["l", "r"]
    assert chain.next_nodes("fan__switch", SWITCH_FALSE) == ["group__switch"]
    assert chain.next_nodes("l", "x") == ["group__switch"] and chain.next_nodes("r", "x") == ["group__switch"]
    assert chain.next_nodes("group__switch", SWITCH_TRUE) == ["g1"]
    assert chain.next_nodes("group__switch", SWITCH_FALSE) == ["end"]
    assert chain.next_nodes("g2", "x") == ["end"]
    assert "fan" not in chain.nodes and "group" not in chain.nodes


def test_nested_steps_chain_in_order():
    chain = build(
        pipe(
            "a",
            steps=[
                {"id": "s1", "uses": "probe"},
                {"steps": [{"id": "n1", "uses": "echo"}, {"steps": [{"id": "n2", "uses": "probe"}]}]},
                {"id": "s2", "uses": "probe"},
            ],
        )
    ).pipelines["a"]
    path: list[str] = []
    node: str | None = chain.entries[0]
    while node:
        path.append(node)
        following = chain.next_nodes(node, "x")
        node = following[0] if following else None
    assert path == ["s1", "n1", "n2", "s2"]


def test_call_is_inlined_as_call_step_slash_inner_step():
    compiled = build(
        pipe(
            "outer",
            steps=[
                {"id": "a", "uses": "probe"},
                {"id": "inner", "call": "reusable"},
                {"id": "z", "uses": "probe"},
            ],
        ),
        pipe("reusable", steps=[{"id": "r1", "uses": "echo"}, {"id": "r2", "uses": "notify.send"}]),
    )
    outer = compiled.pipelines["outer"]
    assert set(outer.nodes) == {"a", "inner/r1", "inner/r2", "z"}
    assert outer.next_nodes("a", "x") == ["inner/r1"]
    assert outer.next_nodes("inner/r1", "x") == ["inner/r2"]
    assert outer.next_nodes("inner/r2", "x") == ["z"]
    assert (outer.nodes["inner/r2"].plugin, outer.nodes["inner/r2"].command) == ("notify", "send")
    assert outer.called == ("reusable",)
    assert set(compiled.pipelines["reusable"].nodes) == {"r1", "r2"}  # and it still stands on its own


def test_calls_nest_and_the_same_pipeline_can_be_called_twice():
    compiled = build(
        pipe("top", steps=[{"id": "m1", "call": "middle"}, {"id": "m2", "call": "middle", "if": GATE}]),
        pipe("middle", steps=[{"id": "b", "call": "bottom"}]),
        pipe("bottom", steps=[{"id": "leaf", "uses": "probe"}]),
    )
    top = compiled.pipelines["top"]
    assert set(top.nodes) == {"m1/b/leaf", "m2/b/leaf", "m2__switch"}
    assert top.entries == ("m1/b/leaf",)
    assert top.next_nodes("m1/b/leaf", "x") == ["m2__switch"]
    assert top.next_nodes("m2__switch", SWITCH_TRUE) == ["m2/b/leaf"]
    assert top.called == ("middle",)


def test_unnamed_steps_get_stable_automatic_ids():
    chain = build(pipe("a", steps=[{"uses": "probe"}, {"uses": "echo", "if": GATE}, {"call": "b"}]), pipe("b"))
    assert set(chain.pipelines["a"].nodes) == {"step_1", "step_2", "step_2__switch", "step_3/only"}


def test_with_and_baggage_are_kept_on_the_node():
    node = (
        build(
            pipe(
                "a",
                steps=[
                    {
                        "id": "notify",
                        "uses": "notify",
                        "with": {"message": "Status {payload.status}", "n": 2},
                        "baggage": {"status.current": "payload.status", "from": "payload.meta", "namespace": "m"},
                    }
                ],
            )
        )
        .pipelines["a"]
        .nodes["notify"]
    )
    assert node.with_ == {"message": "Status {payload.status}", "n": 2}
    assert node.baggage.claims == (("status.current", "payload.status"),)
    assert (node.baggage.bulk_from, node.baggage.namespace) == ("payload.meta", "m")


def test_step_level_if_may_read_config_and_context():
    condition = {"all": [{"path": "config.mode", "op": "eq", "value": "fast"}, {"path": "context.t", "op": "exists"}]}
    chain = build(pipe("a", steps=[{"id": "s", "uses": "probe", "if": condition}])).pipelines["a"]
    assert chain.nodes["s__switch"].condition == condition


# -- shape, fingerprint, Mermaid ---------------------------------------------------------------


def sample(**changes):
    steps = [
        {"id": "first", "uses": "echo"},
        {"id": "gate", "uses": "probe", "if": changes.pop("gate", GATE), "with": changes.pop("with", {"m": "x"})},
        {"split": [{"id": "left", "uses": "probe"}, {"id": "right", "uses": changes.pop("right", "echo")}]},
        {"id": "inner", "call": "helper"},
    ]
    helper = pipe("helper", steps=[{"id": "r", "uses": "probe", "baggage": changes.pop("baggage", {"k": "payload.k"})}])
    return [pipe("main", steps=steps, **changes), helper]


def test_shape_lists_entry_edge_and_terminal_routes():
    condition = {"path": "payload.go", "op": "eq", "value": True}
    compiled = build(*sample(from_plugin="echo", **{"if": condition}))
    shape = compiled.pipelines["main"].shape()
    assert shape["pipeline"] == "main" and shape["execution_mode"] == "async"
    routes = {r["id"]: r for r in shape["routes"]}
    assert routes["entry:first"] == {
        "id": "entry:first",
        "source": {"on": "main.start", "source_plugin": "echo", "if": condition, "depth_lt": DEFAULT_MAX_DEPTH},
        "to": {"kind": "uses", "step": "first", "plugin": "echo", "command": "handle"},
    }
    assert routes["edge:first->gate__switch"]["to"]["plugin"] == SWITCH
    assert routes["edge:gate__switch->gate"]["source"] == {"step": "gate__switch", "event_type": SWITCH_TRUE}
    assert routes["edge:gate__switch->left"]["source"]["event_type"] == SWITCH_FALSE
    assert routes["edge:gate__switch->right"]["source"]["event_type"] == SWITCH_FALSE
    assert routes["edge:gate->left"]["source"] == {"step": "gate", "event_type": None}
    assert routes["edge:left->inner/r"]["to"] == {
        "kind": "uses",
        "step": "inner/r",
        "plugin": "probe",
        "command": "handle",
    }
    assert routes["edge:right->inner/r"]["to"]["step"] == "inner/r"
    assert routes["terminal:inner/r"] == {
        "id": "terminal:inner/r",
        "source": {"step": "inner/r", "event_type": None},
        "to": {"kind": "terminal"},
    }
    assert [r for r in routes if r.startswith("entry:")] == ["entry:first"]
    assert [r for r in routes if r.startswith("terminal:")] == ["terminal:inner/r"]


def test_a_relay_step_is_one_core_relay_node_the_pipeline_moves_on_from():
    relay = {"to": "lab", "event": "backup.ready", "with": {"id": "payload.archive"}, "dedupe_key": "{payload.archive}"}
    compiled = build(
        pipe("p", steps=[{"id": "make", "uses": "echo"}, {"id": "ship", "relay": relay}, {"uses": "probe"}])
    )
    pipeline = compiled.pipelines["p"]
    ship = pipeline.nodes["ship"]
    assert (ship.kind, ship.plugin, ship.command) == ("relay", "core.relay", "handle")
    assert ship.relay is not None and (ship.relay.to, ship.relay.event) == ("lab", "backup.ready")
    assert pipeline.next_nodes("make", "echo.poll") == ["ship"] and pipeline.next_nodes("ship", "x") == ["step_1"]
    routes = {r["id"]: r for r in pipeline.shape()["routes"]}
    assert routes["edge:make->ship"]["to"] == {"kind": "relay", "step": "ship", "to": "lab", "event": "backup.ready"}
    assert '    n_ship[/"ship<br/>relay backup.ready to lab"/]' in mermaid(pipeline).splitlines()
    # What it sends decides behaviour: another event type is another fingerprint.
    other = build(pipe("p", steps=[{"id": "make", "uses": "echo"}, {"id": "ship", "relay": {**relay, "event": "b.x"}}]))
    assert compiled.fingerprint() != other.fingerprint()


def test_shape_of_a_hook_and_of_a_switch_that_can_end_the_run():
    compiled = build(
        {"name": "h", "on-hook": "job.failed", "max_depth": 0, "steps": [{"id": "s", "uses": "probe", "if": GATE}]}
    )
    routes = {r["id"]: r for r in compiled.pipelines["h"].shape()["routes"]}
    assert routes["entry:s__switch"]["source"] == {"hook": "job.failed"}  # max_depth 0: unlimited, no depth_lt
    assert routes["terminal:s__switch@ductile.switch.false"]["source"] == {
        "step": "s__switch",
        "event_type": SWITCH_FALSE,
    }
    assert "terminal:s" in routes


def test_fingerprint_is_a_stable_prefixed_blake3_hex_digest():
    first, again = build(*sample()).fingerprint(), build(*sample()).fingerprint()
    assert first == again
    assert re.fullmatch(r"blake3:[0-9a-f]{64}", first)  # prefixed, as the original writes every BLAKE3
    assert build(*reversed(sample())).fingerprint() == first  # the order pipelines are listed in is not config


@pytest.mark.parametrize(
    "change",
    [
        {"right": "notify"},
        {"gate": {"path": "payload.n", "op": "gte", "value": 4}},
        {"with": {"m": "y"}},
        {"baggage": {"k": "payload.other"}},
        {"timeout": "1m"},
        {"execution_mode": "synchronous"},
        {"max_depth": 3},
        {"from_plugin": "echo"},
        {"if": GATE},
        {"on": "main.other"},
    ],
)
def test_any_change_changes_the_fingerprint(change):
    assert build(*sample(**change)).fingerprint() != build(*sample()).fingerprint()


def test_mermaid_shows_every_node_and_the_branch_labels():
    chart = mermaid(build(*sample()).pipelines["main"])
    lines = chart.splitlines()
    assert lines[0] == "flowchart TD"
    assert 'trigger(["on main.start"])' in chart
    for label in (
        "first<br/>echo.handle",
        "gate<br/>probe.handle",
        "left<br/>probe.handle",
        "inner/r<br/>probe.handle",
    ):
        assert f'["{label}"]' in chart
    assert '{"if: gate"}' in chart
    assert "    n_gate__switch -->|true| n_gate" in lines
    assert "    n_gate__switch -->|false| n_left" in lines
    assert "    n_gate__switch -->|false| n_right" in lines
    assert "    trigger --> n_first" in lines
    assert "    n_right --> n_inner_r" in lines


def test_mermaid_marks_a_conditional_trigger_and_the_source_plugin():
    chart = mermaid(build(*sample(from_plugin="echo", **{"if": GATE})).pipelines["main"])
    assert 'trigger(["on main.start from echo"])' in chart
    assert "    trigger -->|if| n_first" in chart.splitlines()


def test_mermaid_keeps_steps_whose_ids_differ_only_in_punctuation_apart():
    chart = mermaid(
        build(pipe("a", steps=[{"id": "a-b", "uses": "probe"}, {"id": "a_b", "uses": "echo"}])).pipelines["a"]
    )
    node_lines = [line.strip() for line in chart.splitlines() if "<br/>" in line]
    mermaid_ids = [line.split("[", 1)[0] for line in node_lines]
    assert len(set(mermaid_ids)) == 2
    assert f"{mermaid_ids[0]} --> {mermaid_ids[1]}" in chart


def test_mermaid_escapes_quotes_in_labels():
    chart = mermaid(build(pipe("a", steps=[{"id": 'say "hi"', "uses": "probe"}])).pipelines["a"])
    assert "say #quot;hi#quot;<br/>probe.handle" in chart
    assert '"hi"' not in chart


# A step id that would reconfigure the whole diagram (Mermaid reads `%%{init: …}%%` anywhere in its
# text), end its label and start a node and an edge of its own, and carry HTML and a bidi override.
INJECTING = (
    '%%{init: {"theme": "forest", "themeCSS": ".node rect {fill: red}"}}%% "] --> evil["x'
    "\n%%{init: {'theme': 'dark'}}%%\nclick n_evil href \"javascript:alert(1)\" `**md**` <img src=x> \u202e"
)


def test_no_name_in_a_chart_can_carry_a_directive_or_leave_its_label():
    chart = mermaid(
        build(
            pipe(
                "p",
                steps=[
                    {"id": INJECTING, "uses": "echo"},
                    {"id": "ship", "relay": {"to": "lab", "event": "done.ready"}},
                ],
                **{"on": f"go.{INJECTING}"},
            )
        ).pipelines["p"]
    )
    lines = chart.splitlines()
    assert len(lines) == 6  # the header, the trigger, two nodes, two edges: nothing the ids added
    assert "%" not in chart and "`" not in chart and "<img" not in chart and "\u202e" not in chart
    for line in lines[1:4]:  # each label is one quoted string: no quote inside it, no brace
        label = line.split('"')[1]
        assert line.count('"') == 2 and "{" not in label and "}" not in label and "\n" not in label
    assert "#37;#37;#123;init: #123;#quot;theme#quot;: #quot;forest#quot;" in lines[2]
    assert "#92;u202e" in lines[2]  # a bidi override is drawn as its escape


# -- unknown keys, the automatic depth cap, config.* of a gate ---------------------------------


def test_a_mistyped_step_key_is_refused_with_a_suggestion():
    where, message = refused(steps_of({"id": "s", "uses": "probe", "iff": GATE}))
    assert where == "pipelines[0].steps[0].iff"
    assert "unknown key 'iff' (did you mean 'if'?)" in message


def test_an_unknown_pipeline_key_is_refused():
    where, message = refused(pipe("a", exection_mode="synchronous"))
    assert where == "pipelines[0].exection_mode"
    assert "did you mean 'execution_mode'?" in message


def test_the_depth_cap_is_20_for_short_pipelines_and_the_longest_chain_for_long_ones():
    short = pipe("short", steps=[{"uses": "probe"}, {"uses": "echo", "if": GATE}])
    long_steps: list[dict[str, object]] = [{"uses": "probe"} for _ in range(24)]
    long_steps[5] = {"uses": "probe", "if": GATE}  # the switch is one more hop
    long = pipe("long", steps=long_steps)
    fixed = pipe("fixed", steps=long_steps, max_depth=7)
    compiled = build(short, long, fixed).pipelines
    assert compiled["short"].max_depth == DEFAULT_MAX_DEPTH == 20
    assert compiled["long"].max_depth == 25
    assert compiled["fixed"].max_depth == 7


def test_a_gate_reading_config_over_two_plugins_is_refused_and_over_one_names_it():
    reads_config = {"path": "config.mode", "op": "eq", "value": "fast"}
    where, message = refused(steps_of({"id": "g", "if": reads_config, "split": [{"uses": "probe"}, {"uses": "echo"}]}))
    assert where == "pipelines[0].steps[0].if.path"
    assert "config.* is ambiguous" in message and "probe, echo" in message
    nested = steps_of({"id": "g", "if": reads_config, "steps": [{"id": "inner", "uses": "echo", "if": GATE}]})
    pipeline = build(nested).pipelines["a"]
    assert pipeline.gated_plugin("g__switch") == "echo"  # seen through the inner switch
