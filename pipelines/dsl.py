"""The pipelines DSL: validate `pipelines:` and compile it into a routing graph. Pure, no I/O.

DSL reference (spec 003) §1-§3 and §10. A pipeline compiles to nodes (a `uses` step, or the
internal `core.switch` hop an `if:` becomes) joined by edges that say which finished node, for
which event type, starts which next node. `steps:` nest, `split:` fans out, and `call:` is inlined
(its steps become nodes named `<call step>/<step>`), so the runtime never needs a call stack.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import blake3

from pipelines import predicates, templates
from pipelines.baggage import BaggageError, BaggageSpec
from pipelines.baggage import parse as parse_baggage

if TYPE_CHECKING:
    from pipelines.relay_step import RelaySpec

HOOK_SIGNALS = ("job.completed", "job.failed", "job.timed_out", "job.dead")
DEFAULT_MAX_DEPTH = 20
SWITCH = "core.switch"
RELAY = "core.relay"  # the hop a `relay:` step compiles to (pipelines/relay_step.py)
# The hops the core runs itself, which every worker takes whatever plugins it serves.
CORE_HOPS = frozenset({SWITCH, RELAY})
SWITCH_TRUE, SWITCH_FALSE = "ductile.switch.true", "ductile.switch.false"
STEP_SUCCEEDED = "ductile.step.succeeded"
SWITCH_SUFFIX = "__switch"
DEFAULT_TIMEOUT = 30.0
_STEP_KINDS = ("uses", "call", "steps", "split", "relay")


@dataclass(frozen=True)
class Node:
    id: str
    kind: str  # uses | switch | relay
    plugin: str = ""
    command: str = "handle"
    with_: Mapping[str, Any] | None = None
    baggage: BaggageSpec = field(default_factory=BaggageSpec)
    condition: Mapping[str, Any] | None = None
    relay: RelaySpec | None = None


@dataclass(frozen=True)
class Pipeline:
    name: str
    trigger: str
    is_hook: bool
    from_plugin: str | None
    condition: Mapping[str, Any] | None
    max_depth: int  # 0 = unlimited
    execution_mode: str
    timeout: float
    nodes: Mapping[str, Node]
    edges: Mapping[str, tuple[tuple[str | None, str], ...]]  # node -> ((event type or any, next node))
    entries: tuple[str, ...]
    called: tuple[str, ...]

    def next_nodes(self, node_id: str, event_type: str) -> list[str]:
        return [target for wanted, target in self.edges.get(node_id, ()) if wanted in (None, event_type)]

    def gated_plugin(self, switch_id: str) -> str | None:
        """The plugin whose `config.*` a step-level `if:` reads (one by construction: see `_gated`)."""
        plugins = _gated(self.nodes, self.edges, self.next_nodes(switch_id, SWITCH_TRUE))
        return plugins[0] if plugins else None

    def is_terminal(self, node_id: str, event_type: str) -> bool:
        return not self.next_nodes(node_id, event_type)

    def shape(self) -> dict[str, Any]:
        """The compiled routes as data: entry, edge, terminal (what `config/view` shows)."""
        source: dict[str, Any] = {"hook" if self.is_hook else "on": self.trigger}
        if self.from_plugin:
            source["source_plugin"] = self.from_plugin
        if self.condition:
            source["if"] = self.condition
        if self.max_depth:
            source["depth_lt"] = self.max_depth
        routes = [{"id": f"entry:{n}", "source": source, "to": _describe(self.nodes[n])} for n in self.entries]
        for node_id in sorted(self.nodes):
            for wanted, target in self.edges.get(node_id, ()):
                routes.append(
                    {
                        "id": f"edge:{node_id}->{target}",
                        "source": {"step": node_id, "event_type": wanted},
                        "to": _describe(self.nodes[target]),
                    }
                )
            exits = [SWITCH_FALSE] if self.nodes[node_id].kind == "switch" else [None]
            for wanted in exits:
                if not any(w == wanted for w, _ in self.edges.get(node_id, ())):
                    routes.append(
                        {
                            "id": f"terminal:{node_id}" + (f"@{wanted}" if wanted else ""),
                            "source": {"step": node_id, "event_type": wanted},
                            "to": {"kind": "terminal"},
                        }
                    )
        return {"pipeline": self.name, "execution_mode": self.execution_mode, "routes": routes}

    def fingerprint(self) -> str:
        """`blake3:` and the BLAKE3 of everything in this pipeline that decides behaviour (its
        routes, every node's plugin, command, `with:`, `baggage:` and `if:`, its timeout), as the
        original prints each compiled pipeline's."""
        return _blake3(self._fingerprinted())

    def _fingerprinted(self) -> dict[str, Any]:
        nodes = [_node_body(self.nodes[n]) for n in sorted(self.nodes)]
        return {**self.shape(), "timeout": self.timeout, "nodes": nodes}


def _describe(node: Node) -> dict[str, Any]:
    if node.relay is not None:
        return {"kind": "relay", "step": node.id, "to": node.relay.to, "event": node.relay.event}
    return {"kind": "uses", "step": node.id, "plugin": node.plugin, "command": node.command}


def _node_body(node: Node) -> dict[str, Any]:
    baggage = node.baggage
    return {
        "id": node.id,
        "kind": node.kind,
        "plugin": node.plugin,
        "command": node.command,
        "with": node.with_,
        "baggage": {"claims": baggage.claims, "from": baggage.bulk_from, "namespace": baggage.namespace},
        "if": node.condition,
        "relay": None if node.relay is None else {**vars(node.relay), "baggage": vars(node.relay.baggage)},
    }


@dataclass(frozen=True)
class PipelineSet:
    pipelines: Mapping[str, Pipeline] = field(default_factory=dict)

    def triggered_by(self, event_type: str) -> list[Pipeline]:
        return [p for p in self.pipelines.values() if not p.is_hook and p.trigger == event_type]

    def has_hooks(self) -> bool:
        return any(p.is_hook for p in self.pipelines.values())

    def hooks(self, signal: str) -> list[Pipeline]:
        return [p for p in self.pipelines.values() if p.is_hook and p.trigger == signal]

    def fingerprint(self) -> str:
        """`blake3:` and the BLAKE3 of every pipeline's fingerprinted body;
        independent of pipeline order."""
        return _blake3([p._fingerprinted() for p in sorted(self.pipelines.values(), key=lambda p: p.name)])


def _blake3(body: Any) -> str:
    return "blake3:" + blake3.blake3(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class PipelineProblem:
    path: tuple[str | int, ...]
    message: str

    @property
    def where(self) -> str:
        out = ""
        for part in self.path:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        return out


class PipelineErrors(ValueError):
    def __init__(self, problems: Sequence[PipelineProblem]):
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{p.where}: {p.message}" for p in self.problems))


def _validate(schema: Mapping[str, Any], document: Any) -> Iterable[Any]:
    # Not at import: jsonschema is ~30 ms of a process's start, and the gateway validates through
    # its own `schema_errors` (gateway/config/validity.py), which imports it only when needed.
    from jsonschema import Draft202012Validator

    errors: Iterable[Any] = Draft202012Validator(schema).iter_errors(document)
    return errors


@cache
def pipeline_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(Path(__file__).with_name("pipeline.schema.json").read_text(encoding="utf-8"))
    return schema


def compile_pipelines(
    raw: Sequence[Mapping[str, Any]],
    plugin_commands: Mapping[str, Iterable[str] | None],
    parse_duration: Any = float,
    schema_errors: Callable[[Mapping[str, Any], Any], Iterable[Any]] | None = None,
    relay_targets: Iterable[str] = (),
) -> PipelineSet:
    """Validate and compile every pipeline; raises PipelineErrors naming pipeline, step and key.

    `plugin_commands` maps each configured plugin or alias to its commands, or to None when its
    manifest could not load (the name is known; its commands cannot be checked). Every problem is
    reported, not just the first: a call cycle or a duplicate name does not hide the other
    pipelines' problems.

    `schema_errors(schema, document)` gives jsonschema's errors; by default the document is
    validated as it is (the gateway passes one that remembers what passed before:
    gateway.config.validity).

    `relay_targets`: the enabled instances of relay-instances.yaml a `relay:` step may name."""
    data = [dict(p) if isinstance(p, Mapping) else p for p in raw]
    problems = [_schema_problem(error) for error in (schema_errors or _validate)(pipeline_schema(), data)]
    if problems:
        raise PipelineErrors(sorted(problems, key=_pipeline_index))
    commands = {name: None if cmds is None else frozenset(cmds) for name, cmds in plugin_commands.items()}
    by_name: dict[str, int] = {}
    for index, spec in enumerate(data):
        if spec["name"] in by_name:
            problems.append(
                PipelineProblem(
                    ("pipelines", index, "name"),
                    f"pipeline {spec['name']!r} is defined twice (first at pipelines[{by_name[spec['name']]}])",
                )
            )
        else:
            by_name[spec["name"]] = index
    compiled: dict[str, Pipeline] = {}
    for index, spec in enumerate(data):
        builder = _Builder(data, by_name, commands, index, frozenset(relay_targets))
        pipeline = builder.pipeline(spec, parse_duration)
        problems += builder.problems
        if pipeline is not None and by_name[pipeline.name] == index:
            compiled[pipeline.name] = pipeline
    if problems:
        # A called pipeline's problems are found again while it is inlined: report each once.
        unique = list(dict.fromkeys(problems))
        raise PipelineErrors(sorted(unique, key=_pipeline_index))
    return PipelineSet(compiled)


def _pipeline_index(problem: PipelineProblem) -> int:
    return problem.path[1] if len(problem.path) > 1 and isinstance(problem.path[1], int) else -1


def _schema_problem(error: Any) -> PipelineProblem:
    path: tuple[str | int, ...] = ("pipelines", *error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        # A typo such as `iff:` must not be dropped silently: the step would run unconditionally.
        known = list(error.schema.get("properties", {}))
        unknown = sorted(str(k) for k in error.instance if k not in known)
        hints = [difflib.get_close_matches(k, known, n=1) for k in unknown]
        text = ", ".join(
            f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in zip(unknown, hints, strict=True)
        )
        return PipelineProblem((*path, unknown[0]), f"unknown key {text}; allowed: {', '.join(known)}")
    if error.validator == "required" and isinstance(error.instance, Mapping):
        # jsonschema reports a missing key at its parent; name the key itself.
        missing = [k for k in error.validator_value if k not in error.instance and error.message.startswith(repr(k))]
        if missing:
            path = (*path, missing[0])
    return PipelineProblem(path, error.message)


def _gated(
    nodes: Mapping[str, Node], edges: Mapping[str, Sequence[tuple[str | None, str]]], entries: Iterable[str]
) -> list[str]:
    """The distinct plugins a gate lets through first, looking through nested switches."""
    found: list[str] = []
    for node_id in entries:
        node = nodes[node_id]
        if node.kind == "switch":
            targets = [t for wanted, t in edges.get(node_id, ()) if wanted == SWITCH_TRUE]
            found += [p for p in _gated(nodes, edges, targets) if p not in found]
        elif node.plugin not in found:
            found.append(node.plugin)
    return found


def auto_max_depth(
    nodes: Mapping[str, Node], edges: Mapping[str, Sequence[tuple[str | None, str]]], entries: Sequence[str]
) -> int:
    """The route depth cap when the author sets none: 20, or the pipeline's longest chain of hops
    (switches and inlined calls included) when that is longer, so a long pipeline is never cut
    short by the default meant to stop runaway loops."""
    longest: dict[str, int] = {}

    def hops(node_id: str) -> int:
        # The graph is acyclic (calls are inlined and call cycles refused), so this terminates.
        if node_id not in longest:
            longest[node_id] = 1 + max((hops(target) for _, target in edges.get(node_id, ())), default=0)
        return longest[node_id]

    return max(DEFAULT_MAX_DEPTH, max((hops(entry) for entry in entries), default=0))


def _called(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for step in steps:
        if isinstance(step.get("call"), str):
            out.append(step["call"])
        for nested in ("steps", "split"):
            out += _called(step.get(nested) or [])
    return out


def _cycle_text(cycle: Sequence[str]) -> str:
    """`a -> b -> a`, starting from the smallest name so every call site reports it alike."""
    ring = list(cycle[:-1])
    start = ring.index(min(ring))
    ring = ring[start:] + ring[:start]
    return " -> ".join([*ring, ring[0]])


KeyPath = tuple[str | int, ...]
Exits = list[tuple[str, str | None]]


class _Builder:
    """Compiles one pipeline. Paths are full config key paths (`("pipelines", 0, "steps", 1, ...)`);
    while a `call:` is inlined they point into the called pipeline, where the step is written."""

    def __init__(
        self,
        data: Sequence[Mapping[str, Any]],
        by_name: Mapping[str, int],
        commands: Mapping[str, frozenset[str] | None],
        index: int,
        relay_targets: frozenset[str],
    ):
        self.data, self.by_name, self.commands, self.index = data, by_name, commands, index
        self.relay_targets = relay_targets
        self.problems: list[PipelineProblem] = []
        self.nodes: dict[str, Node] = {}
        self.edges: dict[str, list[tuple[str | None, str]]] = {}
        self.auto = 0
        # Every id given out, explicit or automatic, with the inlined call (frame) that made it.
        self.ids: dict[str, tuple[int, str]] = {}
        self.stack: list[int] = [index]  # pipelines being inlined, outermost first
        self.frames: list[int] = [0]
        self.call_sites: list[KeyPath] = []  # the `call` keys being inlined, outermost first
        self.next_frame = 0

    def fail(self, path: KeyPath, message: str) -> None:
        self.problems.append(PipelineProblem(path, message))

    def pipeline(self, spec: Mapping[str, Any], parse_duration: Any) -> Pipeline | None:
        base: KeyPath = ("pipelines", self.index)
        name = spec["name"]
        if "on" in spec and "on-hook" in spec:
            self.fail((*base, "on-hook"), "`on` and `on-hook` are mutually exclusive: use one")
        elif "on" not in spec and "on-hook" not in spec:
            self.fail((*base, "on"), "a pipeline needs a trigger: `on` (an event type) or `on-hook` (a signal)")
        is_hook = "on-hook" in spec
        from_plugin = spec.get("from_plugin")
        if from_plugin is not None and from_plugin not in self.commands:
            self.fail((*base, "from_plugin"), f"unknown plugin {from_plugin!r}")
        condition = spec.get("if")
        if condition is not None:
            try:
                predicates.validate(condition, roots=("payload", "context"), where="if")
            except predicates.InvalidCondition as exc:
                self.fail((*base, "if", *exc.path), exc.message)
            # A hook's context.* test is accepted (DSL reference §2.1): hooks start fresh roots, so
            # today it reads an absent context and is false, like a payload test of a missing key.
        timeout = DEFAULT_TIMEOUT
        if "timeout" in spec:
            try:
                timeout = float(parse_duration(spec["timeout"]))
            except (TypeError, ValueError) as exc:
                self.fail((*base, "timeout"), str(exc))
        entries, _ = self.sequence(spec["steps"], (*base, "steps"), prefix="")
        if self.problems:
            return None
        return Pipeline(
            name=name,
            trigger=str(spec["on-hook"] if is_hook else spec["on"]),
            is_hook=is_hook,
            from_plugin=from_plugin,
            condition=condition,
            max_depth=spec.get("max_depth", auto_max_depth(self.nodes, self.edges, entries)),
            execution_mode=spec.get("execution_mode", "async"),
            timeout=timeout,
            nodes=dict(self.nodes),
            edges={k: tuple(v) for k, v in self.edges.items()},
            entries=tuple(entries),
            called=tuple(dict.fromkeys(_called(spec["steps"]))),
        )

    def sequence(self, steps: Sequence[Mapping[str, Any]], path: KeyPath, prefix: str) -> tuple[list[str], Exits]:
        entries: list[str] = []
        exits: Exits = []
        for position, step in enumerate(steps):
            step_entries, step_exits = self.step(step, (*path, position), prefix)
            if position == 0:
                entries = step_entries
            for node_id, wanted in exits:
                for target in step_entries:
                    self.edges.setdefault(node_id, []).append((wanted, target))
            exits = step_exits
        return entries, exits

    def step(self, step: Mapping[str, Any], path: KeyPath, prefix: str) -> tuple[list[str], Exits]:
        kinds = [k for k in _STEP_KINDS if k in step]
        if len(kinds) != 1:
            self.fail(
                path, f"a step must do exactly one of {', '.join(_STEP_KINDS)} (found {', '.join(kinds) or 'none'})"
            )
            return [], []
        kind = kinds[0]
        for key in ("with", "baggage"):
            if key in step and kind != "uses":
                self.fail((*path, key), f"{key} is only valid on uses steps")
        named = kind in ("uses", "call", "relay") or "if" in step
        step_id = self.node_id(step.get("id"), path, prefix) if named else ""
        if kind == "uses":
            entries, exits = self.uses(step, path, step_id)
        elif kind == "relay":
            entries, exits = self.relay(step["relay"], (*path, "relay"), step_id)
        elif kind == "call":
            clashed = any(p.path == (*path, "id") for p in self.problems)  # do not inline a clash twice
            entries, exits = ([], []) if clashed else self.call(step["call"], (*path, "call"), prefix=f"{step_id}/")
        elif kind == "steps":
            entries, exits = self.sequence(step["steps"], (*path, "steps"), prefix)
        else:
            entries, exits = [], []
            for branch, sub in enumerate(step["split"]):
                branch_entries, branch_exits = self.step(sub, (*path, "split", branch), prefix)
                entries += branch_entries
                exits += branch_exits
        if "if" not in step:
            return entries, exits
        try:
            predicates.validate(step["if"], where="if")
        except predicates.InvalidCondition as exc:
            self.fail((*path, "if", *exc.path), exc.message)
            return entries, exits
        if not entries:
            return entries, exits
        gated = _gated(self.nodes, self.edges, entries)
        reads_config = predicates.find_root(step["if"], "config")
        if reads_config is not None and len(gated) > 1:
            self.fail(
                (*path, "if", *reads_config),
                f"config.* is ambiguous here: the gated step starts with plugins {', '.join(gated)}; "
                "put the if: on one uses step, or test payload.* or context.* instead",
            )
        switch_id = f"{step_id}{SWITCH_SUFFIX}"
        if switch_id in self.ids:
            self.fail((*path, "id"), f"the if: of step {step_id!r} needs the id {switch_id!r}, which is already used")
        self.ids[switch_id] = (self.frames[-1], "switch")
        self.nodes[switch_id] = Node(id=switch_id, kind="switch", plugin=SWITCH, condition=step["if"])
        self.edges[switch_id] = [(SWITCH_TRUE, entry) for entry in entries]
        return [switch_id], [*exits, (switch_id, SWITCH_FALSE)]

    def call(self, target: str, path: KeyPath, prefix: str) -> tuple[list[str], Exits]:
        """Inline the called pipeline's steps as `<call step id>/<step id>` (spec 003 §3.2, §10)."""
        if target not in self.by_name:
            self.fail(path, f"unknown pipeline {target!r}")
            return [], []
        callee = self.by_name[target]
        if callee in self.stack:
            cycle = [self.data[i]["name"] for i in [*self.stack[self.stack.index(callee) :], callee]]
            self.fail(path, f"call cycle: {_cycle_text(cycle)} (a pipeline may not call itself, directly or not)")
            return [], []
        self.next_frame += 1
        self.stack.append(callee)
        self.frames.append(self.next_frame)
        self.call_sites.append(path)
        try:
            return self.sequence(self.data[callee]["steps"], ("pipelines", callee, "steps"), prefix)
        finally:
            self.stack.pop()
            self.frames.pop()
            self.call_sites.pop()

    def node_id(self, preferred: str | None, path: KeyPath, prefix: str) -> str:
        frame = self.frames[-1]
        if preferred is None:
            while True:
                self.auto += 1
                candidate = f"{prefix}step_{self.auto}"
                if candidate not in self.ids:
                    self.ids[candidate] = (frame, "auto")
                    return candidate
        node_id = f"{prefix}{preferred}"
        if node_id not in self.ids:
            self.ids[node_id] = (frame, "explicit")
            return node_id
        owner, how = self.ids[node_id]
        if owner != frame:
            # Only inlining made the clash (the caller, or another inlined call, has this id).
            self.fail(self.call_sites[0], f"inlining this call makes step id {node_id!r}, which is already used")
        elif how == "auto":
            self.fail((*path, "id"), f"step id {preferred!r} is the automatic id of an earlier step without an id")
        elif how == "switch":
            self.fail((*path, "id"), f"step id {preferred!r} is already the id of an if: switch")
        else:
            self.fail((*path, "id"), f"step id {preferred!r} is used twice in this pipeline")
        return node_id

    def relay(self, raw: Any, path: KeyPath, node_id: str) -> tuple[list[str], Exits]:
        """A `relay:` step: one `core.relay` hop that sends, then moves the pipeline on."""
        # Imported here: every process compiles pipelines at its start, and few relay.
        from pipelines import relay_step

        try:
            spec = relay_step.parse(raw)
        except relay_step.RelayStepError as exc:
            self.fail((*path, *exc.path), exc.message)
            return [], []
        if spec.to not in self.relay_targets:
            known = ", ".join(sorted(self.relay_targets)) or "none"
            self.fail((*path, "to"), f"unknown relay instance {spec.to!r} (enabled in relay-instances.yaml: {known})")
        self.nodes[node_id] = Node(id=node_id, kind="relay", plugin=RELAY, relay=spec)
        return [node_id], [(node_id, None)]

    def uses(self, step: Mapping[str, Any], path: KeyPath, node_id: str) -> tuple[list[str], Exits]:
        target = step["uses"]
        plugin, command = target, "handle"
        if target not in self.commands and "." in target:
            plugin, command = target.rsplit(".", 1)
        if plugin not in self.commands:
            self.fail((*path, "uses"), f"unknown plugin or alias {target!r}")
        elif (known := self.commands[plugin]) is not None and command not in known:
            self.fail((*path, "uses"), f"plugin {plugin!r} has no command {command!r}")
        with_ = step.get("with")
        for key, value in (with_ or {}).items():
            try:
                templates.references(value, key=f"with.{key}")
            except templates.TemplateError as exc:
                self.fail((*path, "with", key), str(exc))
        try:
            baggage = parse_baggage(step.get("baggage"), where="baggage")
        except BaggageError as exc:
            self.fail((*path, "baggage", *exc.path), exc.message)
            baggage = BaggageSpec()
        self.nodes[node_id] = Node(
            id=node_id, kind="uses", plugin=plugin, command=command, with_=with_, baggage=baggage
        )
        return [node_id], [(node_id, None)]
