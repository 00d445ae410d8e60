"""What an accepted webhook becomes: one queued job for the endpoint's plugin and command (idiom 1,
spec 000 §3.1: the webhook receiver is a producer like any other). With no event given, the queue
wraps the payload as a `webhook.trigger` event from source `webhook`, as it wraps the API's as
`api.trigger`, so a `handle` command reads the body from `event.payload`."""

from __future__ import annotations

from typing import Any

from gateway import intake
from gateway.config.webhooks import Endpoint
from gateway.runtime import Runtime
from ledger.storable import Unstorable, loads
from ledger.submitters import Submitter


def body_payload(body: bytes) -> dict[str, Any]:
    """The body as the plugin reads it: a JSON object as itself; any other JSON value, or text that
    is not JSON, under `value` (as the event envelope wraps a non-object payload); no body, `{}`.
    intake.Refused for what the ledger cannot store (NUL, an unpaired surrogate, nesting past
    ledger.storable.MAX_DEPTH): a 400, not a failed insert the sender would retry for ever."""
    if not body.strip():
        return {}
    text = body.decode("utf-8", errors="replace")
    try:
        value = loads(text, "body")
    except Unstorable as exc:
        raise intake.Refused(str(exc)) from None
    except ValueError:
        value = intake.checked(text, "body")
    return value if isinstance(value, dict) else {"value": value}


def enqueue_delivery(runtime: Runtime, endpoint: Endpoint, body: bytes) -> str:
    """Queue the job for a verified body; returns its id."""
    spec = intake.job(
        runtime,
        Submitter.WEBHOOK,
        endpoint.plugin,
        endpoint.command,
        body_payload(body),
        note=f"endpoint {endpoint.name} ({endpoint.path})",
    )
    return intake.submit_ids(runtime, [spec])[0]
