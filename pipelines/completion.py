"""What a finished job leads to: the events it logs and every job that follows. Pure, no I/O.

The executor (gateway.execution.dispatch) spawns a plugin, judges its answer and records the
outcome; what that outcome means for the pipelines is decided here, in one function, from plain
data: the job's position (pipeline step, depth, baggage), the events its plugin or core step
emitted, the events that announce how the attempt ended, and the lifecycle signals that start
`on-hook` pipelines. Every successor comes back as a `Successor` (its depth, refusal and hook
generation decided), which the gateway's intake turns into a job (`intake.successor`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pipelines import predicates
from pipelines.dsl import STEP_SUCCEEDED, SWITCH_FALSE, SWITCH_TRUE, PipelineSet
from pipelines.event_envelope import stamp_event
from pipelines.relay_step import RelaySpec
from pipelines.routes import RoutingTable
from pipelines.successors import (
    Position,
    Successor,
    carry_forward,
    entry_matches,
    entry_successors,
    stamp_upstream,
    successors,
    synthetic_success,
)

Event = Mapping[str, Any]


@dataclass(frozen=True)
class Finished:
    """A finished attempt as the pipelines see it."""

    plugin: str
    position: Position
    # The job's event as it was queued: a pipeline step carries its named fields forward.
    event: Event
    # What the attempt emitted (judged events of a plugin, a switch's branch, a relay's acceptance);
    # None for an attempt that did not succeed. A pipeline step that succeeds with none still moves
    # its pipeline on with the payload it ran with (`ran_with`, after `with:`) and its `result`
    # (DSL reference §4.3).
    emitted: Sequence[Event] | None = None
    result: Any = None
    ran_with: Event | None = None
    # Events announcing how the attempt ended (`job.retry_scheduled`, `job.retry_exhausted`,
    # `poll.completed`), and `poll.started`, which opens the attempt's story: each starts whatever
    # listens for it, but never moves the job's own pipeline (a retry is not a step's result).
    announced: Sequence[Event] = ()
    opening: Sequence[Event] = ()
    # Lifecycle signals (`job.completed`, `job.failed`, `job.dead`, ...) that start `on-hook`
    # pipelines when `hooks` (else they are only logged), already enveloped; `hook_depth` is the
    # generation of hooks the job belongs to.
    signals: Sequence[Event] = ()
    hooks: bool = False
    hook_depth: int = 0


@dataclass(frozen=True)
class Aftermath:
    # Stamped events logged before the attempt's own (poll.started) and after them, in order.
    opening: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    successors: list[Successor] = field(default_factory=list)
    # Why an `on-hook` pipeline a signal matched was not started (its hook depth).
    unstarted_hooks: list[str] = field(default_factory=list)


def aftermath(
    finished: Finished,
    *,
    routes: RoutingTable,
    pipelines: PipelineSet,
    hook_max_depth: int,
    clock: Callable[[], str],
    new_id: Callable[[], str],
) -> Aftermath:
    """The stamped events `finished` logs and every successor: its pipeline's next steps, the
    pipelines and routes its events start, the listeners of its announcements, and its hooks.
    `clock` (an RFC 3339 instant, read once if an event is stamped) and `new_id` stamp the events."""
    position = finished.position
    if not leads_somewhere(
        finished.emitted, position, opening=finished.opening, announced=finished.announced, signals=finished.signals
    ):
        return Aftermath()
    emitted = list(finished.emitted or ())
    if finished.emitted is not None and not emitted and position.pipeline:
        emitted = [synthetic_success(finished.ran_with or finished.event, finished.result)]
    input_payload = finished.event.get("payload") or {}
    timestamp = clock()

    def stamp(events: Sequence[Event], carry: bool) -> list[dict[str, Any]]:
        return [
            stamp_event(
                carry_forward(input_payload, e) if carry else e,
                source=finished.plugin,
                timestamp=timestamp,
                event_id=new_id(),
            )
            for e in events
        ]

    def follow(events: list[dict[str, Any]], at: Position) -> list[Successor]:
        found = successors(
            source_plugin=finished.plugin, position=at, events=events, routes=routes, pipelines=pipelines
        )
        # Published plugins read where an event came from (the original's contract).
        return [replace(s, event=upstream(s.event, finished.plugin, at.pipeline)) for s in found]

    # Announcements route from the job's depth only: no pipeline step, no baggage.
    outside = Position(depth=position.depth)
    stamped = stamp(emitted, bool(position.pipeline))
    opening = stamp(finished.opening, False)
    announced = stamp(finished.announced, False)
    found = follow(stamped, position) + follow(opening, outside) + follow(announced, outside)
    hooks, unstarted = hook_successors(finished, pipelines, hook_max_depth) if finished.hooks else ([], [])
    return Aftermath(opening, stamped + announced + [dict(s) for s in finished.signals], found + hooks, unstarted)


def leads_somewhere(
    emitted: Sequence[Event] | None,
    position: Position,
    *,
    opening: Sequence[Event] = (),
    announced: Sequence[Event] = (),
    signals: Sequence[Event] = (),
) -> bool:
    """Whether a finished attempt has anything to stamp or to start: false in the common case, a
    job outside any pipeline that emitted and announced nothing (a pipeline step that succeeds
    silently still moves its pipeline on)."""
    return bool(emitted or opening or announced or signals or (emitted is not None and position.pipeline))


def upstream(event: Event, plugin: str, pipeline: str | None) -> dict[str, Any]:
    """`event` with its payload stamped with the plugin (and pipeline) it came from."""
    return {**event, "payload": stamp_upstream(event.get("payload") or {}, plugin, pipeline)}


def hook_successors(
    finished: Finished, pipelines: PipelineSet, hook_max_depth: int
) -> tuple[list[Successor], list[str]]:
    """The entry hops of every `on-hook` pipeline a signal starts, fresh roots one hook generation
    deeper, none past `hook_max_depth` (DSL reference §8-§9); and why each one not started was not."""
    found: list[Successor] = []
    unstarted: list[str] = []
    for signal in finished.signals:
        for pipeline in pipelines.hooks(signal["type"]):
            if finished.hook_depth >= hook_max_depth:
                unstarted.append(
                    f"hook {pipeline.name} not started: hook depth {finished.hook_depth} reached service.hook_max_depth"
                )
                continue
            if entry_matches(pipeline, finished.plugin, signal, {}):
                hops = entry_successors(pipeline, signal, {}, 1)
                found += [replace(s, hook_depth=finished.hook_depth + 1) for s in hops]
    return found, unstarted


def switch_branch(condition: Mapping[str, Any], scope: Mapping[str, Any]) -> dict[str, Any]:
    """The event a `core.switch` hop emits: its `if:` decided on the hop's payload, context and
    the gated plugin's config (spec 003 §6.3)."""
    decision = predicates.evaluate(condition, scope)
    return {"type": SWITCH_TRUE if decision else SWITCH_FALSE, "payload": dict(scope.get("payload") or {})}


def relayed_event(
    spec: RelaySpec, *, status: str, peer: str, receiver_event_id: str, job_id: str | None
) -> dict[str, Any]:
    """What a relay step moves its pipeline on with once the receiver accepted: where the event
    went and the receiver's acceptance (its event id, the peer name it knows us by, its first job)."""
    payload = {
        "relay_to": spec.to,
        "relay_event_type": spec.event,
        "relay_receiver_event_id": receiver_event_id,
        "relay_receiver_peer": peer,
        "relay_receiver_job_id": job_id,
        "relay_acceptance_status": status,
    }
    return {"type": STEP_SUCCEEDED, "payload": payload}
