"""Accepting a relayed event (spec 000 "Remote Event Relay", "What Happens"): the peer, timestamp,
key id, signature and envelope are checked in the original's order and with its answers, then the
event becomes a fresh local root event, routed like any other (every pipeline whose `on:` matches
starts), its jobs submitted by `relay:<peer>`. Only the baggage keys the peer's `baggage.allow`
lists seed the new root context; no lineage crosses instances.

A replay of the same signed request inside the clock-skew window enqueues nothing new: the
envelope's dedupe key (or, without one, `relay:<peer>:<origin instance>:<origin event id>`)
deduplicates it like any other enqueue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from gateway import intake
from gateway.config.relay import RelayIngress
from gateway.intake.events import as_roots, root_event
from gateway.relay import wire
from gateway.runtime import Runtime
from ledger.submitters import Submitter
from pipelines.router import Position, successors


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


def refused(status: int, message: str) -> Answer:
    return Answer(status, {"error": message})


def receive(
    runtime: Runtime, ingress: RelayIngress, peer_name: str, *, path: str, headers: Mapping[str, str], body: bytes
) -> Answer:
    """One POST to `<listen_path>/<peer>`; `headers` as sent (any case)."""
    header = {k.lower(): v.strip() for k, v in headers.items()}
    peer = ingress.peers.get(peer_name.strip())
    if peer is None:
        return refused(403, "unknown relay peer")
    if header.get(wire.PEER.lower()) != peer.name:
        return refused(403, "peer identity mismatch")
    stamp = header.get(wire.TIMESTAMP.lower(), "")
    if not stamp:
        return refused(403, "missing relay timestamp")
    try:
        sent = wire.parse_timestamp(stamp)
    except wire.OutOfRange:
        return refused(403, wire.OUTSIDE_SKEW)
    except ValueError:
        return refused(403, "invalid relay timestamp")
    if abs((datetime.now(UTC) - sent).total_seconds()) > ingress.allowed_clock_skew:
        return refused(403, wire.OUTSIDE_SKEW)
    key_id = header.get(wire.KEY_ID.lower(), "")
    if ingress.require_key_id and not key_id:
        return refused(403, wire.KEY_ID_MISSING)
    secret = peer.secret_for(key_id)
    if secret is None:
        return refused(403, wire.KEY_ID_MISMATCH)
    signature = header.get(wire.SIGNATURE.lower(), "")
    if not signature:
        return refused(403, "missing relay signature")
    if len(body) > ingress.max_body_size:
        return refused(413, "relay payload too large")
    if not wire.signature_matches("POST", path, stamp, body, signature, secret):
        return refused(403, "forbidden")
    try:
        envelope = wire.read_envelope(body)
    except wire.BadEnvelope as exc:
        return refused(400, str(exc))
    origin = envelope.origin.get("instance", "").strip()
    if origin and origin != peer.name:
        return refused(403, "origin instance mismatch")
    if peer.accept and envelope.event_type not in peer.accept:
        return refused(422, "event type not allowed for peer")
    dedupe_key = envelope.dedupe_key
    if dedupe_key is None and envelope.origin.get("event_id", "").strip():
        dedupe_key = f"relay:{peer.name}:{origin}:{envelope.origin['event_id'].strip()}"
    try:
        event = root_event(
            envelope.event_type, intake.checked(envelope.payload, "event.payload"), f"relay:{peer.name}", dedupe_key
        )
        allowed = {k: v for k, v in envelope.baggage.items() if k in peer.baggage_allow}
        baggage = intake.checked(allowed, "baggage")  # stored with the root step's context
    except intake.Refused as exc:
        return refused(400, str(exc))
    starts = successors(
        source_plugin=None,
        position=Position(context=baggage),
        events=[event],
        routes=runtime.routing,
        pipelines=runtime.pipelines,
    )
    try:
        specs = [replace(spec, actor=peer.name) for spec in as_roots(runtime, starts, Submitter.RELAY)]
    except intake.Refused as exc:
        return refused(400, str(exc))
    job_ids = intake.submit_ids(runtime, specs)
    return Answer(
        202,
        {
            "status": "accepted",
            "peer": peer.name,
            "event_type": envelope.event_type,
            "receiver_event_id": event["event_id"],
            "job_id": job_ids[0] if job_ids else None,
        },
    )
