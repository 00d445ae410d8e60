"""Root ingress of events and pipelines: what `event publish`, `pipeline run` and (later) the API
and webhooks call. Each enqueues through the router like any other event."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from gateway.dispatch import child_spec, iso
from gateway.runtime import Runtime
from ledger.ids import new_id
from ledger.models import Job
from pipelines.router import Position, step_successor, successors
from pipelines.routing import stamp_event


def root_event(event_type: str, payload: dict[str, Any], source: str, dedupe_key: str | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"type": event_type, "payload": payload}
    if dedupe_key:
        raw["dedupe_key"] = dedupe_key
    return stamp_event(raw, source=source, timestamp=iso(timezone.now()), event_id=new_id())


def publish_event(
    runtime: Runtime, event_type: str, payload: dict[str, Any], *, submitted_by: str, dedupe_key: str | None = None
) -> list[str]:
    """A root event, routed like any other: every matching pipeline starts. Returns the job ids."""
    event = root_event(event_type, payload, submitted_by, dedupe_key)
    found = successors(
        source_plugin=None, position=Position(), events=[event], routes=runtime.routing, pipelines=runtime.pipelines
    )
    return _enqueue(
        runtime, [child_spec(s, runtime, parent=None, upstream_pipeline=None, submitted_by=submitted_by) for s in found]
    )


def run_pipeline(
    runtime: Runtime, name: str, payload: dict[str, Any], *, submitted_by: str, dedupe_key: str | None = None
) -> list[str]:
    """Start one named pipeline at its entry steps, whatever its trigger."""
    pipeline = runtime.pipelines.pipelines[name]
    event = root_event(pipeline.trigger, payload, submitted_by, dedupe_key)
    specs = [
        child_spec(
            step_successor(pipeline, node, event, {}, 1),
            runtime,
            parent=None,
            upstream_pipeline=None,
            submitted_by=submitted_by,
        )
        for node in pipeline.entries
    ]
    return _enqueue(runtime, specs)


def _enqueue(runtime: Runtime, specs: list[Any]) -> list[str]:
    ttl = runtime.config.service.dedupe_ttl
    with transaction.atomic():
        return [Job.objects.enqueue(spec, default_dedupe_ttl=ttl).job_id for spec in specs]
