"""Root events and pipelines: what `event publish`, `pipeline run` and the API's pipeline trigger
start. Each is routed like any other event; the jobs enter through the intake (gateway.intake)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from gateway import intake
from gateway.config.frozen import thaw
from gateway.intake.trees import TreeOutcome, TreeWaiter
from gateway.logs import logger
from gateway.runtime import Runtime
from ledger.ids import new_id
from ledger.models import EventRecord, JobSpec
from ledger.submitters import Submitter
from ledger.timestamps import rfc3339
from pipelines.dsl import Pipeline
from pipelines.event_envelope import stamp_event
from pipelines.simulate import ASSUMPTION, dry_run
from pipelines.successors import MAX_CONTEXT_BYTES, Position, Successor, entry_successors, successors

log = logger("events")


def root_event(event_type: str, payload: dict[str, Any], source: str, dedupe_key: str | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"type": event_type, "payload": payload}
    if dedupe_key:
        raw["dedupe_key"] = dedupe_key
    return stamp_event(raw, source=source, timestamp=rfc3339(timezone.now()), event_id=new_id())


def event_starts(
    runtime: Runtime, event_type: str, payload: dict[str, Any], *, source: str, dedupe_key: str | None = None
) -> list[Successor]:
    """What a root event starts: every pipeline whose `on:` matches (routes need a source plugin).
    intake.Refused when the payload cannot be stored."""
    event = root_event(event_type, intake.checked(payload, "payload"), source, dedupe_key)
    return successors(
        source_plugin=None, position=Position(), events=[event], routes=runtime.routing, pipelines=runtime.pipelines
    )


def announce(runtime: Runtime, events: Sequence[dict[str, Any]], *, source: str, now: datetime) -> list[str]:
    """The gateway's own events (`scheduler.*`: `{type, payload}`): each recorded in event_log and
    routed like any root event, starting the pipelines whose `on:` names it (submitted by
    `system`). Call inside the transaction that decided them. A pipeline whose entry cannot start
    on this payload is logged and left out; the event is recorded either way. Returns job ids."""
    if not events:
        return []
    stamped = [root_event(e["type"], dict(e["payload"]), source) for e in events]
    EventRecord.record(stamped, job_id=None, now=now)
    specs: list[JobSpec] = []
    for event in stamped:
        starts = successors(
            source_plugin=None, position=Position(), events=[event], routes=runtime.routing, pipelines=runtime.pipelines
        )
        try:
            specs += as_roots(runtime, starts, Submitter.SYSTEM)
        except intake.Refused as exc:
            log.warning("event %s started no pipeline: %s", event["type"], exc)
    return [result.job_id for result in intake.submit(runtime, specs, now=now)]


def pipeline_starts(
    runtime: Runtime, name: str, payload: dict[str, Any], *, source: str, dedupe_key: str | None = None
) -> list[Successor]:
    """One named pipeline's entry steps, whatever its trigger."""
    pipeline = runtime.pipelines.pipelines[name]
    event = root_event(pipeline.trigger, intake.checked(payload, "payload"), source, dedupe_key)
    return entry_successors(pipeline, event, {}, 1)


def as_roots(
    runtime: Runtime, starts: list[Successor], submitter: Submitter, *, actor: str | None = None
) -> list[JobSpec]:
    """The root jobs of a trigger. One its payload cannot start (an entry step's baggage claim
    whose source is missing, or a context over the cap) refuses the whole trigger, enqueueing
    nothing (spec 000, baggage rules: "Missing source paths fail the job or trigger"): the caller
    is there to be told, where a step further down is recorded `failed` with the reason."""
    stopped = [f"pipeline {s.pipeline!r} {s.refusal}" for s in starts if s.refusal]
    if stopped:
        largest = max((s.context_bytes for s in starts if s.context_bytes is not None), default=None)
        raise intake.Refused(
            "; ".join(stopped) + "; nothing was enqueued",
            too_large=None if largest is None else (largest, MAX_CONTEXT_BYTES),
        )
    return [intake.successor(runtime, s, parent=None, submitter=submitter, actor=actor) for s in starts]


def publish_event(
    runtime: Runtime,
    event_type: str,
    payload: dict[str, Any],
    *,
    submitter: Submitter,
    dedupe_key: str | None = None,
    actor: str | None = None,
) -> list[str]:
    """A root event, routed like any other: every matching pipeline starts. Returns the job ids.
    `actor`: who acted for the submitter (an MCP token's name)."""
    starts = event_starts(runtime, event_type, payload, source=submitter.value, dedupe_key=dedupe_key)
    return intake.submit_ids(runtime, as_roots(runtime, starts, submitter, actor=actor))


def pipeline_entries(
    runtime: Runtime,
    name: str,
    payload: dict[str, Any],
    *,
    submitter: Submitter,
    dedupe_key: str | None = None,
    actor: str | None = None,
) -> list[JobSpec]:
    """The root jobs that start one named pipeline."""
    starts = pipeline_starts(runtime, name, payload, source=submitter.value, dedupe_key=dedupe_key)
    return as_roots(runtime, starts, submitter, actor=actor)


def preview(runtime: Runtime, starts: list[Successor]) -> dict[str, Any]:
    """`--dry-run`: every hop that would follow, computed by the real router; nothing is enqueued."""
    instances = runtime.registry.instances

    def config_of(plugin: str) -> dict[str, Any]:
        return thaw(instances[plugin].config.config) if plugin in instances else {}

    hops, truncated = dry_run(starts, routes=runtime.routing, pipelines=runtime.pipelines, config_of=config_of)
    return {"hops": [h.as_dict() for h in hops], "truncated": truncated, "assumption": ASSUMPTION}


class SyncRefused(ValueError):
    """A synchronous run that cannot be answered as one tree (the API's 400)."""


def run_synchronously(
    runtime: Runtime,
    name: str,
    payload: dict[str, Any],
    *,
    submitter: Submitter,
    timeout: float,
    dedupe_key: str | None = None,
    gone: Callable[[], bool] | None = None,
) -> TreeOutcome:
    """Start a pipeline and wait for its whole tree (or `timeout`, or until `gone` says the caller
    left: trees.CallerGone). Entry dispatches are resolved first: more than one cannot be answered
    as one result, so it is refused before anything runs."""
    specs = pipeline_entries(runtime, name, payload, submitter=submitter, dedupe_key=dedupe_key)
    if len(specs) != 1:
        raise SyncRefused(
            f"pipeline {name!r} starts with {len(specs)} entry dispatches; a synchronous run needs exactly one "
            "(run it asynchronously instead)"
        )
    with TreeWaiter() as waiter:
        return waiter.wait(intake.submit_ids(runtime, specs), timeout, gone=gone)


def sync_timeout(pipeline: Pipeline, requested: float | None, cap: float | None = None) -> float:
    """How long a synchronous caller waits: its own request, else the pipeline's `timeout`, never
    past the operator's cap (`api.max_sync_timeout`)."""
    timeout = pipeline.timeout if requested is None else requested
    return min(timeout, cap) if cap else timeout
