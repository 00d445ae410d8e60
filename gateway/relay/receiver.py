"""Accepting a relayed event (spec 000 "Remote Event Relay", "What Happens"): the peer, timestamp,
key id, signature and envelope are checked in the original's order and with its answers, then the
event becomes a fresh local root event, routed like any other (every pipeline whose `on:` matches
starts), its jobs submitted by `relay:<peer>`. Only the baggage keys the peer's `baggage.allow`
lists seed the new root context; no lineage crosses instances.

A delivery accepted once is answered the same way every time it comes again, and starts nothing:
a replay of the captured request (its signature, while its timestamp is inside the clock-skew
window) or a sender's retry of the event (its type and dedupe key, or without a key
`relay:<peer>:<origin instance>:<origin event id>`, within `service.dedupe_ttl`), whatever the
first delivery's jobs have come to. The answer is the original's 202, as it answers a duplicate:
the first acceptance's event and job ids (ledger/models/relay_acceptances.py keeps them, in the database, for
every API process and node).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from gateway import intake
from gateway.config.relay_endpoints import RelayIngress, RelayPeer
from gateway.intake.events import as_roots, root_event
from gateway.logs import logger
from gateway.relay import wire
from gateway.runtime import Runtime
from ledger.models import RelayAcceptance
from ledger.submitters import Submitter
from pipelines.successors import MAX_CONTEXT_BYTES, Position, context_size, successors

log = logger("relay")


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
    now = timezone.now()
    if abs((now - sent).total_seconds()) > ingress.allowed_clock_skew:
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
    digest = wire.digest(signature)
    if digest is None or not wire.signature_matches("POST", path, stamp, body, signature, secret):
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
    dedupe_key, what = envelope.dedupe_key, "event.dedupe_key"
    if dedupe_key is None and envelope.origin.get("event_id", "").strip():
        dedupe_key, what = f"relay:{peer.name}:{origin}:{envelope.origin['event_id'].strip()}", "origin.event_id"
    if dedupe_key is not None and len(dedupe_key) > intake.DEDUPE_KEY_MAX:
        too_long = f"{what} is too long to deduplicate on: a key of {len(dedupe_key)} characters"
        return refused(400, f"{too_long}, at most {intake.DEDUPE_KEY_MAX}")
    try:
        intake.checked(dedupe_key, what)
        event = root_event(
            envelope.event_type, intake.checked(envelope.payload, "event.payload"), f"relay:{peer.name}", dedupe_key
        )
        allowed = {k: v for k, v in envelope.baggage.items() if k in peer.baggage_allow}
        baggage = intake.checked(allowed, "baggage")  # stored with the root step's context
    except intake.Refused as exc:
        return Answer(exc.status, exc.body())
    # The successors measure a context when a step claims into it; a peer's baggage is the first
    # context of the run, so it is measured here, against the same cap.
    size = context_size(baggage)
    if size > MAX_CONTEXT_BYTES:
        message = f"baggage is {size} bytes, over the 1 MiB cap on a pipeline's context; nothing was enqueued"
        oversize = intake.Refused(message, too_large=(size, MAX_CONTEXT_BYTES))
        return Answer(oversize.status, oversize.body())
    starts = successors(
        source_plugin=None,
        position=Position(context=baggage),
        events=[event],
        routes=runtime.routing,
        pipelines=runtime.pipelines,
    )
    try:
        specs = as_roots(runtime, starts, Submitter.RELAY, actor=peer.name)
    except intake.Refused as exc:
        return Answer(exc.status, exc.body())
    delivery = RelayAcceptance.of(
        peer=peer.name,
        signature=digest,
        event_type=envelope.event_type,
        dedupe_key=dedupe_key,
        receiver_event_id=event["event_id"],
        accepted_at=now,
        expires_at=_expiry(runtime, ingress, sent, now, keyed=dedupe_key is not None),
    )

    def start() -> str | None:
        job_ids = intake.submit_ids(runtime, specs)
        return job_ids[0] if job_ids else None

    accepted, duplicate = RelayAcceptance.objects.admit(delivery, start)
    if duplicate:
        log.info(
            "relayed %s from %s is a delivery accepted before: answered as then, nothing started",
            envelope.event_type,
            peer.name,
            extra={"peer": peer.name, "receiver_event_id": accepted.receiver_event_id, "job_id": accepted.job_id},
        )
    return _accepted(peer, accepted)


def _accepted(peer: RelayPeer, accepted: RelayAcceptance) -> Answer:
    """The original's 202; a duplicate gets the first acceptance's, as the original answers one
    (the same body, the first job's id)."""
    return Answer(
        202,
        {
            "status": "accepted",
            "peer": peer.name,
            "event_type": accepted.event_type,
            "receiver_event_id": accepted.receiver_event_id,
            "job_id": accepted.job_id,
        },
    )


def _expiry(runtime: Runtime, ingress: RelayIngress, sent: datetime, now: datetime, *, keyed: bool) -> datetime:
    """Until when a copy of this delivery is answered as a duplicate: while its signed timestamp is
    inside the clock-skew window (later it is refused as outside it), and with a dedupe key as long
    as the queue deduplicates a key (`service.dedupe_ttl`), so that a sender retrying minutes later
    is answered too."""
    until = sent + timedelta(seconds=ingress.allowed_clock_skew)
    if keyed:
        until = max(until, now + timedelta(seconds=runtime.config.service.dedupe_ttl))
    return until
