"""A finished job's successors: its events in, the child jobs to enqueue out. Pure, no I/O.

Every emitted event (or a synthetic `ductile.step.succeeded` when a pipeline step emits none)
continues the job's own pipeline along the compiled edges, starts every pipeline whose `on:`
matches (from_plugin and pipeline-level `if:` permitting), and follows every matching `routes:`
entry: fan-out, exact match (spec 000 §7, DSL reference §2-§4).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pipelines import predicates
from pipelines.baggage import RESERVED, BaggageError, accrete
from pipelines.dsl import DEFAULT_MAX_DEPTH, STEP_SUCCEEDED, SWITCH, Pipeline, PipelineSet
from pipelines.routes import RoutingTable

# The reserved baggage namespace for the core's control fields (pipeline, step, depth, instance).
CONTROL = RESERVED
MAX_CONTEXT_BYTES = 1024 * 1024

# Names a pipeline instance's root event_context row from the pipeline and the event that started
# it (uuid5): this module stays pure, and every entry hop of the instance finds the same row.
ROOT_CONTEXT_NAMESPACE = uuid.UUID("6f1c2f0e-35a8-4d7e-9a51-0c2d7e4b8a35")

# Spec "Plugin Development Guide" §7.4: names the core carries from an input event to outputs.
PROPAGATED = ("pattern", "prompt", "model", "output_dir", "output_path", "filename")


@dataclass(frozen=True)
class Position:
    """Where a finished job stands: its pipeline step (if any), route depth and baggage."""

    pipeline: str | None = None
    node: str | None = None
    depth: int = 0
    context: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RootContext:
    """A pipeline instance's shared root event_context row (step ""), written once per instance
    when its entry splits: every entry branch's own row points to it (the original's pipeline
    instance root)."""

    id: str
    pipeline: str
    accumulated: Mapping[str, Any]


@dataclass(frozen=True)
class Successor:
    plugin: str
    command: str
    event: Mapping[str, Any]
    dedupe_key: str | None
    depth: int
    pipeline: str | None = None
    node: str | None = None
    # The baggage this hop starts with; None when the successor is not a pipeline step.
    context: Mapping[str, Any] | None = None
    # Why the successor cannot start (route depth exhausted, a baggage claim failed); it is
    # recorded with this reason so the tree shows where the chain stopped: `dead`, or `failed`
    # when its own baggage claim failed (`claim_failed`: 003 "missing source paths fail the job").
    refusal: str | None = None
    claim_failed: bool = False
    # The accumulated context's size when it is over MAX_CONTEXT_BYTES (the API's 413).
    context_bytes: int | None = None
    # The entry split's shared root row: its parent; `opens_root` on the one hop that writes it.
    root: RootContext | None = None
    opens_root: bool = False
    # An `on-hook` pipeline's entry: a fresh root one hook generation deeper than the job whose
    # lifecycle signal started it (`service.hook_max_depth` stops the chain).
    hook_depth: int | None = None


def synthetic_success(input_event: Mapping[str, Any], result: Any) -> dict[str, Any]:
    """DSL reference §4.3: a step that succeeds without events still moves its pipeline on."""
    payload = dict(input_event.get("payload") or {})
    if result is not None:
        payload["result"] = result
    return {"type": STEP_SUCCEEDED, "payload": payload}


def carry_forward(input_payload: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    payload = dict(event.get("payload") or {})
    for name in PROPAGATED:
        if name in input_payload and name not in payload:
            payload[name] = input_payload[name]
    return {**event, "payload": payload}


def stamp_upstream(payload: Mapping[str, Any], plugin: str, pipeline: str | None) -> dict[str, Any]:
    """Published plugins read where an event came from (the original's contract); never overwritten."""
    out = dict(payload)
    out.setdefault("ductile_upstream_plugin", plugin)
    if pipeline:
        out.setdefault("ductile_upstream_pipeline", pipeline)
    return out


def successors(
    *,
    source_plugin: str | None,
    position: Position,
    events: Iterable[Mapping[str, Any]],
    routes: RoutingTable,
    pipelines: PipelineSet,
) -> list[Successor]:
    out: list[Successor] = []
    context = dict(position.context or {})
    depth = position.depth + 1
    current = pipelines.pipelines.get(position.pipeline or "")
    for event in events:
        if current is not None and position.node is not None:
            for node_id in current.next_nodes(position.node, event["type"]):
                out.append(step_successor(current, node_id, event, context, depth))
        for pipeline in pipelines.triggered_by(event["type"]):
            if entry_matches(pipeline, source_plugin, event, context):
                out += entry_successors(pipeline, event, context, depth)
        if source_plugin is not None:
            for rule in routes.match(source_plugin, event["type"]):
                refusal = _depth_refusal(depth, DEFAULT_MAX_DEPTH, "routes")
                out.append(
                    Successor(
                        rule.target, rule.command, event, event.get("dedupe_key"), depth, context=None, refusal=refusal
                    )
                )
    return out


def entry_matches(
    pipeline: Pipeline, source_plugin: str | None, event: Mapping[str, Any], context: Mapping[str, Any]
) -> bool:
    """`from_plugin` first (a positive assertion: no source never matches), then the `if:`."""
    if pipeline.from_plugin and pipeline.from_plugin != source_plugin:
        return False
    if pipeline.condition is None:
        return True
    return predicates.evaluate(pipeline.condition, {"payload": event.get("payload") or {}, "context": context})


def entry_successors(
    pipeline: Pipeline, event: Mapping[str, Any], inherited: Mapping[str, Any], depth: int
) -> list[Successor]:
    """A pipeline's start: one hop per entry step. When the entry splits, the branches share one
    root row (step "", the inherited claims and the instance's control fields) that each
    branch's row points to, so the instance has one root (DSL reference §3.4: branches share
    the same baggage); a single entry's own row is its instance's root."""
    found = [step_successor(pipeline, node_id, event, inherited, depth) for node_id in pipeline.entries]
    instance = event.get("event_id")
    if len(found) < 2 or not instance:
        return found
    claims = {k: v for k, v in inherited.items() if k != CONTROL}
    control = {"pipeline": pipeline.name, "step": "", "route_depth": depth - 1, "pipeline_instance_id": instance}
    root = RootContext(
        str(uuid.uuid5(ROOT_CONTEXT_NAMESPACE, f"{pipeline.name}\x00{instance}")),
        pipeline.name,
        {**claims, CONTROL: control},
    )
    return [replace(s, root=root, opens_root=i == 0) for i, s in enumerate(found)]


def step_successor(
    pipeline: Pipeline, node_id: str, event: Mapping[str, Any], inherited: Mapping[str, Any], depth: int
) -> Successor:
    """The hop into `node_id`. Its baggage is the inherited context plus the step's claims, and the
    core's control fields under the reserved `ductile` namespace (claims may not write there)."""
    node = pipeline.nodes[node_id]
    refusal = _depth_refusal(depth, pipeline.max_depth, f"pipeline {pipeline.name!r}")
    found = inherited.get(CONTROL)
    previous: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    claims = {k: v for k, v in inherited.items() if k != CONTROL}
    claim_failed, oversize = False, None
    if refusal is None and node.kind == "uses" and not node.baggage.empty:
        try:
            claims = accrete(claims, node.baggage, {"payload": event.get("payload") or {}, "context": inherited})
            size = context_size(claims)
            if size > MAX_CONTEXT_BYTES:
                refusal = f"step {node_id!r}: accumulated context is {size} bytes, over the 1 MiB cap"
                claim_failed, oversize = True, size
        except BaggageError as exc:
            refusal, claim_failed = f"step {node_id!r}: {exc}", True
    # One pipeline instance per entry: continuing steps keep it, an entry starts a new one (named
    # by the event that started it, so this module stays pure and the id is stable on replay).
    same_run = previous.get("pipeline") == pipeline.name and node_id not in pipeline.entries
    instance = previous.get("pipeline_instance_id") if same_run else None
    control = {
        "pipeline": pipeline.name,
        "step": node_id,
        "route_depth": depth,
        "pipeline_instance_id": instance or event.get("event_id"),
    }
    context = {**claims, CONTROL: control}
    plugin, command = (SWITCH, "handle") if node.kind == "switch" else (node.plugin, node.command)
    return Successor(
        plugin,
        command,
        event,
        event.get("dedupe_key"),
        depth,
        pipeline.name,
        node_id,
        context,
        refusal,
        claim_failed=claim_failed,
        context_bytes=oversize,
    )


def context_size(context: Mapping[str, Any]) -> int:
    """A context's size as the cap counts it: compact JSON, UTF-8 bytes."""
    return len(json.dumps(context, separators=(",", ":"), default=str).encode())


def _depth_refusal(depth: int, limit: int, what: str) -> str | None:
    if limit and depth > limit:
        return f"route depth {depth} exceeds the limit of {limit} for {what}: the chain is stopped here"
    return None
