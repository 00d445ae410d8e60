"""What an accepted webhook becomes: one queued job for the endpoint's plugin and command (idiom 1,
spec 000 §3.1: the webhook receiver is a producer like any other). With no event given, the queue
wraps the payload as a `webhook.trigger` event from source `webhook`, as it wraps the API's as
`api.trigger`, so a `handle` command reads the body from `event.payload`."""

from __future__ import annotations

import json
from typing import Any

from gateway.runtime import Runtime
from gateway.webhooks.endpoints import Endpoint
from ledger.models import Job, JobSpec

SUBMITTED_BY = "webhook"


class UnstorableBody(ValueError):
    """A verified body the queue cannot hold, refused on every backend alike."""


def body_payload(body: bytes) -> dict[str, Any]:
    """The body as the plugin reads it: a JSON object as itself; any other JSON value, or text that
    is not JSON, under `value` (as the router wraps an event's non-object payload); no body, `{}`."""
    if not body.strip():
        return {}
    text = body.decode("utf-8", errors="replace")
    try:
        value = json.loads(text, parse_constant=_not_json)
    except ValueError:
        value = text
    # PostgreSQL's jsonb cannot store a NUL character: refused here, as a 400, rather than as a
    # failed insert that the sender would retry for ever.
    if _holds_nul(value):
        raise UnstorableBody("the body holds a NUL character, which the queue cannot store")
    return value if isinstance(value, dict) else {"value": value}


def enqueue_delivery(runtime: Runtime, endpoint: Endpoint, body: bytes) -> str:
    """Queue the job for a verified body; returns its id."""
    spec = JobSpec(
        plugin=endpoint.plugin,
        command=endpoint.command,
        submitted_by=SUBMITTED_BY,
        payload=body_payload(body),
        max_attempts=runtime.config.plugins[endpoint.plugin].retry.max_attempts,
        note=f"endpoint {endpoint.name} ({endpoint.path})",
    )
    return Job.objects.enqueue(spec, default_dedupe_ttl=runtime.config.service.dedupe_ttl).job_id


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _not_json(constant: str) -> Any:
    # NaN and Infinity are Python's extension, not JSON, and PostgreSQL's jsonb refuses them.
    raise ValueError(f"{constant} is not JSON")
