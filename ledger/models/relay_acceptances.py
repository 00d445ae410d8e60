"""`relay_acceptances`: the relayed deliveries this gateway accepted (spec 000 "Remote Event Relay"),
kept while a replay or a sender's retry of one may still come, so that it is answered as the first
delivery was and starts nothing.

A delivery is the same as an accepted one when it carries the same signature (a captured request
sent again: its timestamp is inside the clock-skew window for as long as the row lives), or the
same event type and dedupe key (a sender's retry after a timeout, signed anew; without a key, the
receiver's `relay:<peer>:<origin>:<event id>`). Whatever became of the first delivery's jobs
(queued, running, failed, dead or succeeded), it is the answer: after acceptance the receiver owns
the event (spec 000, "Failure Semantics"), and a job that failed is the receiver's to retry, not
the sender's to start again.

The rows live in the ledger, not in a process's memory, so the answer holds across every API
process and every node of a shared PostgreSQL. A copy of an accepted delivery is answered from a
plain read, outside any write transaction. Two unique constraints are what decides when two copies
arrive at once: each delivery claims its row with `INSERT ... ON CONFLICT DO NOTHING` before it
enqueues anything, in the same transaction; the loser's insert waits for the winner's commit and
then finds its row. Housekeeping prunes a row once it expired (gateway/operations/housekeeping.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime

from django.db import models
from django.db.models import Q

from ledger.models.retention import PrunableQuerySet
from ledger.writes.group_commit import shared


class RelayAcceptanceQuerySet(PrunableQuerySet["RelayAcceptance"]):
    def expired(self, before: datetime) -> RelayAcceptanceQuerySet:
        """Past the window in which a replay or a retry could still come (`before`: now)."""
        return self.filter(expires_at__lt=before)

    def same_as(self, delivery: RelayAcceptance) -> RelayAcceptanceQuerySet:
        """Rows of `delivery`'s peer holding its signature, or its event type and dedupe key."""
        same = Q(signature=delivery.signature)
        if delivery.scope is not None:
            same |= Q(scope=delivery.scope)
        return self.filter(same, peer=delivery.peer)

    def admit(self, delivery: RelayAcceptance, start: Callable[[], str | None]) -> tuple[RelayAcceptance, bool]:
        """Accept `delivery` unless an unexpired acceptance holds its signature or dedupe key: then
        that acceptance and True, and nothing is started. Otherwise `start()` (the enqueue of the
        event's jobs, returning the first job's id) runs in the same transaction as the row's
        insert, and the row comes back with that job's id, and False."""
        same = self.same_as(delivery)
        # First a plain read: a replayed request comes as often as whoever captured it sends it,
        # and an answered copy then costs no write transaction (on SQLite, no turn at the lock).
        held = same.filter(expires_at__gt=delivery.accepted_at).order_by("accepted_at").first()
        if held is not None:
            return held, True

        def attempt() -> tuple[RelayAcceptance, bool]:
            # An expired row still holding the key until housekeeping comes: the key is free again.
            same.filter(expires_at__lte=delivery.accepted_at).delete()
            self.bulk_create([delivery], ignore_conflicts=True)
            held = same.order_by("accepted_at").first()
            if held is not None and held.receiver_event_id != delivery.receiver_event_id:
                return held, True
            delivery.job_id = start()
            if delivery.job_id is not None:
                same.filter(receiver_event_id=delivery.receiver_event_id).update(job_id=delivery.job_id)
            return delivery, False

        return shared(attempt)


class RelayAcceptance(models.Model):
    peer = models.CharField(max_length=200)
    signature = models.CharField(max_length=64)  # hex HMAC-SHA256, as wire.digest writes it
    event_type = models.TextField()
    dedupe_key = models.TextField(null=True, blank=True)
    # sha256 of event type and dedupe key: what the unique constraint compares, whatever their length.
    scope = models.CharField(max_length=64, null=True, blank=True)
    # The answer every copy of the delivery gets.
    receiver_event_id = models.CharField(max_length=36)
    job_id = models.CharField(max_length=36, null=True, blank=True)
    accepted_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    objects = RelayAcceptanceQuerySet.as_manager()

    class Meta:
        db_table = "relay_acceptances"
        constraints = [
            models.UniqueConstraint(fields=["peer", "signature"], name="relay_acceptances_signature_uniq"),
            models.UniqueConstraint(
                fields=["peer", "scope"], condition=Q(scope__isnull=False), name="relay_acceptances_scope_uniq"
            ),
        ]
        indexes = [models.Index(fields=["expires_at"], name="relay_acceptances_expiry_idx")]  # pruning

    def __str__(self) -> str:
        return f"{self.peer}: {self.event_type} -> {self.receiver_event_id}"

    @classmethod
    def of(
        cls,
        *,
        peer: str,
        signature: str,
        event_type: str,
        dedupe_key: str | None,
        receiver_event_id: str,
        accepted_at: datetime,
        expires_at: datetime,
    ) -> RelayAcceptance:
        scope = None
        if dedupe_key is not None:
            scope = hashlib.sha256(f"{event_type}\n{dedupe_key}".encode()).hexdigest()
        return cls(
            peer=peer,
            signature=signature,
            event_type=event_type,
            dedupe_key=dedupe_key,
            scope=scope,
            receiver_event_id=receiver_event_id,
            accepted_at=accepted_at,
            expires_at=expires_at,
        )
