"""`GET /topology`: the plugin → event → plugin graph of a loaded runtime (spec 000 idiom 8,
"Diagnostics"). Pure, no I/O.

Three sources draw it. `routes:` (a source plugin's event starts a target command), pipelines (the
trigger starts the entry steps; each step starts the next), and manifests (`values.emit`: the
events a plugin's command declares). A pipeline's `if:` hops (`core.switch`) are looked through:
the graph joins the plugins either side and marks the edge conditional, because one shared
`core.switch` node would seem to connect every pipeline that uses `if:` to every other. A `relay:`
step is drawn as the remote gateway it sends to (`relay:<instance>`), its edge naming the event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.runtime import Runtime
from pipelines.dsl import Node, Pipeline
from pipelines.visualize import mermaid_label

# What a step edge waits for: any event the step emits (`ductile.step.succeeded` when it emits none).
ANY_EVENT = "*"


class _Graph:
    def __init__(self, runtime: Runtime):
        self.registry = runtime.registry
        self.nodes: dict[str, dict[str, Any]] = {}
        self.edges: list[dict[str, Any]] = []

    def plugin(self, name: str) -> str:
        node_id = f"plugin:{name}"
        if node_id not in self.nodes:
            self.nodes[node_id] = {"id": node_id, "kind": "plugin", "name": name, "state": self._state(name)}
        return node_id

    def _state(self, name: str) -> str:
        """Why a plugin node may be inert: disabled, skipped (it cannot load), or unknown (a route
        names a plugin that is not configured)."""
        for state, group in (
            ("loaded", self.registry.instances),
            ("disabled", self.registry.disabled),
            ("skipped", self.registry.skipped),
        ):
            if name in group:
                return state
        return "unknown"

    def step(self, node: Node) -> str:
        """A pipeline step's node: its plugin, or for a `relay:` step the gateway it sends to."""
        if node.relay is None:
            return self.plugin(node.plugin)
        node_id = f"relay:{node.relay.to}"
        self.nodes.setdefault(node_id, {"id": node_id, "kind": "relay", "name": node.relay.to})
        return node_id

    def event(self, name: str, *, signal: bool = False) -> str:
        kind = "signal" if signal else "event"  # signals: lifecycle hooks such as job.failed
        node_id = f"{kind}:{name}"
        if node_id not in self.nodes:
            node: dict[str, Any] = {"id": node_id, "kind": kind, "name": name}
            if "{" in name:
                node["placeholder"] = True  # a manifest's `{payload.event_type}`: decided at run time
            self.nodes[node_id] = node
        return node_id

    def edge(self, source: str, target: str, kind: str, **details: Any) -> None:
        self.edges.append({"from": source, "to": target, "kind": kind, **details})


def topology(runtime: Runtime) -> dict[str, Any]:
    """`{nodes, edges, mermaid}`. Edge kinds: `emits` (plugin → event), `triggers` (event →
    plugin command) and `step` (plugin → plugin inside a pipeline, on `event`); an edge into a
    relay step's remote gateway carries the event it sends (`relays`)."""
    graph = _Graph(runtime)
    for name, instance in sorted(runtime.registry.instances.items()):
        graph.plugin(name)
        for command in instance.manifest.commands.values():
            for declared in (command.values or {}).get("emit") or ():
                event = graph.event(declared["event"])
                graph.edge(graph.plugin(name), event, "emits", via="manifest", command=command.name)
    for rule in runtime.routing.routes:
        event = graph.event(rule.event_type)
        graph.edge(graph.plugin(rule.source), event, "emits", via="route")
        graph.edge(event, graph.plugin(rule.target), "triggers", via="route", command=rule.command)
    for pipeline in sorted(runtime.pipelines.pipelines.values(), key=lambda p: p.name):
        _pipeline(graph, pipeline)
    nodes = list(graph.nodes.values())
    return {"nodes": nodes, "edges": graph.edges, "mermaid": mermaid(nodes, graph.edges)}


def _pipeline(graph: _Graph, pipeline: Pipeline) -> None:
    trigger = graph.event(pipeline.trigger, signal=pipeline.is_hook)
    if pipeline.from_plugin:
        graph.edge(graph.plugin(pipeline.from_plugin), trigger, "emits", via="pipeline", pipeline=pipeline.name)
    for node, gated in _plugin_steps(pipeline, pipeline.entries):
        graph.edge(
            trigger,
            graph.step(node),
            "triggers",
            via="pipeline",
            pipeline=pipeline.name,
            step=node.id,
            command=node.command,
            conditional=gated or pipeline.condition is not None,
            **_relays(node),
        )
    for source in pipeline.nodes.values():
        if source.kind == "switch":
            continue  # looked through from the step before it
        for wanted, target_id in pipeline.edges.get(source.id, ()):
            for target, gated in _plugin_steps(pipeline, [target_id]):
                graph.edge(
                    graph.step(source),
                    graph.step(target),
                    "step",
                    pipeline=pipeline.name,
                    from_step=source.id,
                    to_step=target.id,
                    command=target.command,
                    event=wanted or ANY_EVENT,
                    conditional=gated,
                    **_relays(target),
                )


def _relays(node: Node) -> dict[str, str]:
    return {"relays": node.relay.event} if node.relay is not None else {}


def _plugin_steps(pipeline: Pipeline, node_ids: Iterable[str], gated: bool = False) -> list[tuple[Node, bool]]:
    """The plugin steps `node_ids` reach, through `if:` switches (both ways), and whether an `if:`
    stood between. Compiled pipelines are acyclic, so this ends."""
    found: list[tuple[Node, bool]] = []
    for node_id in node_ids:
        node = pipeline.nodes[node_id]
        if node.kind == "switch":
            found += _plugin_steps(pipeline, [target for _, target in pipeline.edges.get(node_id, ())], True)
        else:
            found.append((node, gated))
    return found


_SHAPES = {"plugin": ('["', '"]'), "event": ('(["', '"])'), "signal": ('{{"', '"}}'), "relay": ('[/"', '"/]')}


def mermaid(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> str:
    """A Mermaid flowchart: plugins as boxes, events as stadiums, signals as hexagons; step edges
    dotted. Identical lines (an event both declared and routed) are drawn once."""
    ids = {node["id"]: f"n{index}" for index, node in enumerate(nodes)}
    lines = ["flowchart LR"]
    drawn: set[str] = set()
    for node in nodes:
        opening, closing = _SHAPES[node["kind"]]
        lines.append(f"    {ids[node['id']]}{opening}{mermaid_label(node['name'])}{closing}")
    for edge in edges:
        arrow = "-.->" if edge["kind"] == "step" else "-->"
        text = ""
        if edge["kind"] == "triggers":
            text = f"{edge['pipeline']}: {edge['command']}" if edge["via"] == "pipeline" else edge["command"]
        elif edge["kind"] == "step":
            text = edge["pipeline"]
        if "relays" in edge:
            text = f"{edge['pipeline']}: relay {edge['relays']}"
        if edge.get("conditional"):
            text += " (if)"
        label = f'|"{mermaid_label(text)}"|' if text else ""
        line = f"    {ids[edge['from']]} {arrow}{label} {ids[edge['to']]}"
        if line not in drawn:
            drawn.add(line)
            lines.append(line)
    return "\n".join(lines)
