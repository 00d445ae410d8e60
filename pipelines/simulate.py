"""`pipeline dry-run`: walk a pipeline (or a published event's fan-out) without running anything.
Pure, no I/O.

Each hop is computed exactly as the dispatcher would: the same successors (pipelines.successors),
`with:` remap, baggage accretion, predicates and depth guard. What cannot be known without running plugins is assumed:
every plugin step succeeds without emitting events, so the synthetic `ductile.step.succeeded`
carries its (remapped) payload on. Downstream of a plugin, a `with:` path the payload lacks is
shown as `<from upstream output: PATH>` rather than a failure, and a switch whose condition
reads such a path is `unknown` and both of its branches are walked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from pipelines.completion import switch_branch, upstream
from pipelines.dsl import SWITCH, SWITCH_FALSE, SWITCH_TRUE, PipelineSet
from pipelines.paths import MISSING, resolve
from pipelines.predicates import atom_paths
from pipelines.relay_step import RelaySpec, RelayStepError, project
from pipelines.routes import RoutingTable
from pipelines.successors import Position, Successor, carry_forward, successors, synthetic_success
from pipelines.templates import TemplateError, remap

# A runaway fan-out is cut here; the depth guard stops chains long before in any sane config.
MAX_HOPS = 500

ASSUMPTION = (
    "plugin steps are assumed to succeed without emitting events, passing their payload on; "
    "values only a plugin's output can supply are shown as <from upstream output: PATH>, and a "
    "switch that depends on them is unknown (both branches shown)"
)


def _placeholder(path: str) -> str:
    return f"<from upstream output: {path}>"


@dataclass(frozen=True)
class Hop:
    index: int
    parent: int | None
    event_type: str
    plugin: str
    command: str
    depth: int
    pipeline: str | None
    step: str | None
    payload: Mapping[str, Any]  # the request payload the plugin would get (after `with:`)
    context: Mapping[str, Any] | None  # the baggage at this hop
    decision: str | None = None  # a core.switch's verdict: true | false | unknown
    refusal: str | None = None  # why this hop would not run (depth, baggage, a `with:` path)
    # A relay step: what it would send (to, event, payload, dedupe_key, baggage), or, downstream
    # of a plugin, `unknown` with the path only that plugin's output can supply.
    relay: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def dry_run(
    starts: Sequence[Successor],
    *,
    routes: RoutingTable,
    pipelines: PipelineSet,
    config_of: Callable[[str], Mapping[str, Any]],
) -> tuple[list[Hop], bool]:
    """Every hop that would follow from `starts` (breadth first), and whether the walk was cut at
    MAX_HOPS. `config_of(plugin)` is the plugin's config, for `config.*` in step-level `if:`."""
    hops: list[Hop] = []
    # The flag: has this payload been through a plugin (so its real content is unknown here)?
    queue: deque[tuple[Successor, int | None, bool]] = deque((s, None, False) for s in starts)
    while queue:
        if len(hops) >= MAX_HOPS:
            return hops, True
        found, parent, assumed = queue.popleft()
        hop, events = _step(len(hops), parent, found, assumed, pipelines, config_of)
        hops.append(hop)
        if hop.refusal or not events:
            continue
        position = Position(found.pipeline, found.node, found.depth, found.context)
        upstream_payload = found.event.get("payload") or {}
        stamped = [carry_forward(upstream_payload, e) if found.pipeline else e for e in events]
        for nxt in successors(
            source_plugin=found.plugin, position=position, events=stamped, routes=routes, pipelines=pipelines
        ):
            event = upstream(nxt.event, found.plugin, found.pipeline)
            queue.append((replace(nxt, event=event), hop.index, assumed or found.plugin != SWITCH))
    return hops, False


def _relay_hop(
    hop: Hop, spec: RelaySpec, found: Successor, payload: dict[str, Any], context: dict[str, Any], assumed: bool
) -> Hop:
    """What a relay step would send, projected as the dispatcher projects it. A missing path stops
    it as it would stop the real step, unless a plugin upstream may supply it."""
    sends: dict[str, Any] = {"to": spec.to, "event": spec.event}
    try:
        projection = project(spec, {"payload": payload, "dedupe_key": found.event.get("dedupe_key")}, context)
    except RelayStepError as exc:
        if not assumed:
            return replace(hop, relay=sends, refusal=f"preflight: {exc}")
        return replace(hop, relay={**sends, "unknown": str(exc)})
    return replace(
        hop,
        relay={
            **sends,
            "payload": projection.payload,
            "dedupe_key": projection.dedupe_key,
            "baggage": projection.baggage,
        },
    )


def _step(
    index: int,
    parent: int | None,
    found: Successor,
    assumed: bool,
    pipelines: PipelineSet,
    config_of: Callable[[str], Mapping[str, Any]],
) -> tuple[Hop, list[dict[str, Any]]]:
    payload = dict(found.event.get("payload") or {})
    context = dict(found.context or {})
    pipeline = pipelines.pipelines.get(found.pipeline or "")
    node = pipeline.nodes.get(found.node or "") if pipeline else None
    hop = Hop(
        index=index,
        parent=parent,
        event_type=str(found.event.get("type")),
        plugin=found.plugin,
        command=found.command,
        depth=found.depth,
        pipeline=found.pipeline,
        step=found.node,
        payload=payload,
        context=found.context,
        refusal=found.refusal,
    )
    if found.refusal:
        return hop, []
    if found.plugin == SWITCH and pipeline is not None and node is not None and node.condition is not None:
        gated = pipeline.gated_plugin(node.id)
        scope = {"payload": payload, "context": context, "config": dict(config_of(gated)) if gated else {}}
        if assumed and any(resolve(scope, p) is MISSING for p in atom_paths(node.condition) if p.startswith("payload")):
            branches = [{"type": t, "payload": payload} for t in (SWITCH_TRUE, SWITCH_FALSE)]
            return replace(hop, decision="unknown"), branches
        event = switch_branch(node.condition, scope)
        return replace(hop, decision=str(event["type"] == SWITCH_TRUE).lower()), [event]
    if node is not None and node.relay is not None:
        return _relay_hop(hop, node.relay, found, payload, context, assumed), [
            synthetic_success({"payload": payload}, None)
        ]
    if node is not None and node.with_:
        try:
            scope = {"payload": payload, "context": context}
            payload = remap(payload, node.with_, scope, missing=_placeholder if assumed else None)
        except TemplateError as exc:
            return replace(hop, refusal=f"preflight: {exc}"), []
        hop = replace(hop, payload=payload)
    if found.pipeline is None:
        return hop, []  # a plain route target: what it emits is up to the plugin
    return hop, [synthetic_success({"payload": payload}, None)]
