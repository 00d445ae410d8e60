"""Sending one envelope to a named instance of relay-instances.yaml: what a `relay:` step's
`core.relay` job and `ductile relay send` do. Delivery is at-least-once: the sender owns a failure
until the receiver has answered 202, and a retried send carries the same dedupe key."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

from gateway.config.relay_endpoints import Relay
from gateway.relay import wire

# Read at most this much of an answer: a receiver's is a small JSON object.
_ANSWER_LIMIT = 64 * 1024


class RelayFailed(Exception):
    """The envelope was not accepted. `retryable`: the same send may succeed later (the network,
    a 5xx, a 429, and the refusals a later attempt may not meet: a key id the receiver does not
    know yet, a clock outside its window, wire.PASSING_REFUSALS); any other refusal (4xx) would be
    refused again as it is."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None):
        super().__init__(message)
        self.retryable, self.status = retryable, status


@dataclass(frozen=True)
class Acceptance:
    """The receiver's 202: the peer it knew us as, the event it created, its first job."""

    status: str
    peer: str
    event_type: str
    receiver_event_id: str
    job_id: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a new destination: the envelope and its signature were made
    for one instance's path, and a POST followed elsewhere would arrive there as a bare GET."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass(frozen=True)
class Delivery:
    """A signed request ready to go: what `relay send --dry-run` shows and `send` POSTs."""

    url: str
    body: bytes
    headers: dict[str, str]
    timeout: float


def prepare(relay: Relay | None, sender_name: str, to: str, envelope: wire.Envelope) -> Delivery:
    """`envelope` signed for instance `to` as `sender_name`; RelayFailed when it may not go there."""
    instances = relay.instances if relay else {}
    instance = instances.get(to)
    if instance is None:
        known = ", ".join(sorted(instances)) or "none"
        raise RelayFailed(f"no enabled relay instance {to!r} (enabled: {known})", retryable=False)
    if instance.allow and envelope.event_type not in instance.allow:
        allowed = ", ".join(sorted(instance.allow))
        raise RelayFailed(
            f"instance {to!r} does not allow event {envelope.event_type!r} (allow: {allowed})", retryable=False
        )
    body = envelope.body()
    stamp = wire.now_stamp()
    headers = {
        "Content-Type": "application/json",
        wire.PEER: sender_name,
        wire.TIMESTAMP: stamp,
        wire.SIGNATURE: "sha256=" + wire.sign("POST", instance.ingress_path, stamp, body, instance.secret),
    }
    if instance.key_id:
        headers[wire.KEY_ID] = instance.key_id
    return Delivery(instance.url, body, headers, instance.timeout)


def send(relay: Relay | None, sender_name: str, to: str, envelope: wire.Envelope) -> Acceptance:
    """POST `envelope` to instance `to`, signed as `sender_name` (this gateway's service.name)."""
    delivery = prepare(relay, sender_name, to, envelope)
    request = urllib.request.Request(delivery.url, data=delivery.body, headers=delivery.headers, method="POST")
    try:
        with _OPENER.open(request, timeout=delivery.timeout) as response:
            status, raw = response.status, response.read(_ANSWER_LIMIT)
    except urllib.error.HTTPError as exc:
        detail = _error_text(exc.read(_ANSWER_LIMIT))
        retryable = exc.code >= 500 or exc.code in (408, 429) or (exc.code == 403 and detail in wire.PASSING_REFUSALS)
        message = f"{delivery.url} answered {exc.code}: {detail}"
        raise RelayFailed(message, retryable=retryable, status=exc.code) from exc
    except (OSError, ValueError) as exc:  # refused, unreachable, timed out, a broken answer
        reason = getattr(exc, "reason", exc)
        raise RelayFailed(f"{delivery.url} could not be reached: {reason}", retryable=True) from exc
    if status != 202:
        raise RelayFailed(f"{delivery.url} answered {status}, not 202 accepted", retryable=True, status=status)
    try:
        answer = json.loads(raw)
        return Acceptance(
            str(answer.get("status") or "accepted"),
            str(answer.get("peer") or sender_name),
            str(answer.get("event_type") or envelope.event_type),
            str(answer.get("receiver_event_id") or ""),
            answer.get("job_id") or None,
        )
    except (ValueError, AttributeError):
        # Accepted all the same: the receiver owns the event from its 202 on.
        return Acceptance("accepted", sender_name, envelope.event_type, "", None)


def _error_text(raw: bytes) -> str:
    try:
        answer = json.loads(raw)
    except ValueError:
        return raw[:200].decode(errors="replace").strip() or "(no body)"
    return str(answer.get("error") or answer) if isinstance(answer, dict) else str(answer)
