"""The relay's wire (spec 000 "Remote Event Relay", "Wire shape"), as the original speaks it, so a
Ductile of either kind can send to the other: a JSON envelope

    {"event": {"type", "payload", "dedupe_key"?}, "origin": {"instance", "plugin"?, "job_id"?,
     "event_id"?}, "baggage"?: {...}}

POSTed with `X-Ductile-Peer` (the sender's `service.name`), `X-Ductile-Key-Id`,
`X-Ductile-Timestamp` (RFC 3339, or Unix seconds) and `X-Ductile-Signature`: hex HMAC-SHA256, under
the shared tokens.yaml secret, of the method, the request path, the timestamp and the raw body,
joined by newlines (`sha256=` before it is accepted too).

The receiver's refusals are the original's words too (`{"error": ...}`): a sender tells a refusal a
later attempt may not meet (a key the receiver does not know yet, clocks that disagree) from one it
will meet again by those words alone.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ledger.timestamps import rfc3339
from pipelines.relay_step import EVENT_TYPE

PEER, KEY_ID, TIMESTAMP, SIGNATURE = "X-Ductile-Peer", "X-Ductile-Key-Id", "X-Ductile-Timestamp", "X-Ductile-Signature"

KEY_ID_MISSING = "missing relay key id"
KEY_ID_MISMATCH = "relay key id mismatch"
OUTSIDE_SKEW = "relay timestamp outside allowed clock skew"
# Refused now, perhaps not at the next attempt, which signs anew with the key and the time of its
# moment: during a key rotation the receiver may learn the new key id after the sender uses it,
# and a clock stepped or catching up with NTP comes back into the window. Every other refusal
# (a bad signature, an unknown peer, an event the peer may not send) is the same at every attempt.
PASSING_REFUSALS = frozenset({KEY_ID_MISSING, KEY_ID_MISMATCH, OUTSIDE_SKEW})


class BadEnvelope(ValueError):
    """The body is not a relay envelope; the text says what is wrong."""


class OutOfRange(ValueError):
    """A well-formed timestamp no `datetime` holds (before year 1 or after 9999 once in UTC): far
    outside any clock skew, which is what the original, whose clock reaches further, answers."""


@dataclass(frozen=True)
class Envelope:
    event_type: str
    payload: dict[str, Any]
    dedupe_key: str | None = None
    origin: dict[str, str] = field(default_factory=dict)
    baggage: dict[str, Any] = field(default_factory=dict)

    def body(self) -> bytes:
        event: dict[str, Any] = {"type": self.event_type, "payload": self.payload}
        if self.dedupe_key:
            event["dedupe_key"] = self.dedupe_key
        document: dict[str, Any] = {"event": event, "origin": {k: v for k, v in self.origin.items() if v}}
        if self.baggage:
            document["baggage"] = self.baggage
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def sign(method: str, path: str, timestamp: str, body: bytes, secret: str) -> str:
    message = f"{method.strip().upper()}\n{path}\n{timestamp.strip()}\n".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def digest(presented: str) -> str | None:
    """A presented signature as one string however it was written (without `sha256=`, lower-case
    hex): what tells a replay; None when it is not hex."""
    given = presented.strip().removeprefix("sha256=")
    try:
        return bytes.fromhex(given).hex()
    except ValueError:
        return None


def signature_matches(method: str, path: str, timestamp: str, body: bytes, presented: str, secret: str) -> bool:
    """In constant time; a signature that is not hex never matches."""
    given = digest(presented)
    return given is not None and hmac.compare_digest(sign(method, path, timestamp, body, secret), given)


def now_stamp() -> str:
    return rfc3339(datetime.now(UTC))


# Unix seconds are a 64-bit integer to the original: more digits are no timestamp at all.
_UNIX_MAX = 2**63 - 1


def parse_timestamp(raw: str) -> datetime:
    """RFC 3339 (the original sends nanoseconds, which Python's parser cannot take: trimmed to
    microseconds) or Unix seconds; OutOfRange for a time no datetime holds, ValueError for
    anything else that is not one."""
    text = raw.strip()
    if text.isdigit():
        if int(text) > _UNIX_MAX:
            raise ValueError(f"timestamp {raw!r} is not a 64-bit number of seconds")
        try:
            return datetime.fromtimestamp(int(text), UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise OutOfRange(f"timestamp {raw!r} is out of range") from exc
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:digits][:6]}{rest[digits:]}"
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None or "T" not in text.upper():
        raise ValueError(f"timestamp must be RFC 3339 or Unix seconds, got {raw!r}")
    try:
        return parsed.astimezone(UTC)
    except OverflowError as exc:  # 0001-01-01T00:00:00+14:00 is in year 0 in UTC
        raise OutOfRange(f"timestamp {raw!r} is out of range") from exc


def read_envelope(body: bytes) -> Envelope:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadEnvelope("invalid JSON body") from exc
    except RecursionError:
        raise BadEnvelope("the body nests deeper than the gateway reads") from None
    if not isinstance(document, dict) or not isinstance(document.get("event"), dict):
        raise BadEnvelope("the body must be an object with an `event` object")
    event = document["event"]
    event_type = event.get("type")
    if not isinstance(event_type, str) or not event_type.strip():
        raise BadEnvelope("event.type is required")
    if not EVENT_TYPE.fullmatch(event_type.strip()):
        raise BadEnvelope("event.type must use lower-case dotted form")
    payload = event.get("payload")
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise BadEnvelope("event.payload must be an object")
    dedupe_key = event.get("dedupe_key")
    if dedupe_key is not None and not isinstance(dedupe_key, str):
        raise BadEnvelope("event.dedupe_key must be a string")
    origin = document.get("origin") or {}
    baggage = document.get("baggage") or {}
    if not isinstance(origin, dict) or not all(isinstance(v, str) for v in origin.values()):
        raise BadEnvelope("origin must be an object of strings")
    if not isinstance(baggage, dict):
        raise BadEnvelope("baggage must be an object")
    return Envelope(event_type.strip(), payload, (dedupe_key or "").strip() or None, origin, baggage)
