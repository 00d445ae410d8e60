"""`circuit_breakers` (current state per plugin and command) and `circuit_breaker_transitions`
(append-only, why every change happened). Spec 000 §5.8 and "Circuit Breaker".

Only scheduler-originated jobs count and only scheduled enqueues are gated: an API, webhook or
routed job is never blocked by a broken poll. Every attempt's outcome counts, recorded in the
transaction that records the attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ledger.ids import new_id
from ledger.models.retention import PrunableQuerySet
from ledger.writes.transaction import writing


class BreakerState(models.TextChoices):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerReason(models.TextChoices):
    FAILURE_THRESHOLD = "failure_threshold"
    SUCCESS = "success"
    COOLDOWN_ELAPSED = "cooldown_elapsed"
    MANUAL_RESET = "manual_reset"


class Gate(models.TextChoices):
    """What the breaker says to one scheduled enqueue."""

    PASS = "pass"  # closed
    PROBE = "probe"  # half-open: this enqueue is the single probe
    BLOCKED = "blocked"  # open, or half-open with its probe still out


class CircuitBreakerQuerySet(models.QuerySet["CircuitBreaker"]):
    def tripped(self) -> CircuitBreakerQuerySet:
        return self.exclude(state=BreakerState.CLOSED)

    def reset(self, *, by: str, now: datetime | None = None) -> list[CircuitBreaker]:
        """`system reset` and the console's Reset: close every tripped breaker of this queryset,
        each in its own transaction under its row lock, recording `by`. Returns those reset (a
        breaker that closed on its own meanwhile is not)."""
        now = now or timezone.now()
        done = []
        for plugin, command in list(self.tripped().order_by("plugin", "command").values_list("plugin", "command")):
            with writing():
                breaker = CircuitBreaker.locked(plugin, command)
                if breaker.reset(now=now, by=by):
                    done.append(breaker)
        return done

    def locked_for(self, targets: Iterable[tuple[str, str]]) -> dict[tuple[str, str], CircuitBreaker]:
        """The existing rows of these (plugin, command) targets, locked for update; a target with
        no row is closed and needs none until an outcome is counted. Call inside a transaction."""
        targets = set(targets)
        plugins, commands = {p for p, _ in targets}, {c for _, c in targets}
        # Why the row lock: see `CircuitBreaker.locked`. Why in id order: two schedulers locking
        # overlapping sets of rows in different orders could deadlock each other on PostgreSQL.
        rows = self.select_for_update().filter(plugin__in=plugins, command__in=commands).order_by("pk")
        return {(b.plugin, b.command): b for b in rows if (b.plugin, b.command) in targets}


class CircuitBreaker(models.Model):
    plugin = models.CharField(max_length=200)
    command = models.CharField(max_length=200)
    state = models.CharField(max_length=16, choices=BreakerState.choices, default=BreakerState.CLOSED)
    failure_count = models.IntegerField(default=0)
    opened_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    # The latest scheduled job this breaker processed; while half-open, the probe.
    last_job_id = models.CharField(max_length=36, null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = CircuitBreakerQuerySet.as_manager()

    class Meta:
        db_table = "circuit_breakers"
        permissions = [("reset_breaker", "Can reset a circuit breaker")]
        constraints = [models.UniqueConstraint(fields=["plugin", "command"], name="circuit_breakers_target_uniq")]

    def __str__(self) -> str:
        return f"{self.plugin}.{self.command} {self.state} ({self.failure_count})"

    @classmethod
    def locked(cls, plugin: str, command: str) -> CircuitBreaker:
        """The row for update, created closed on first use. Call inside a transaction."""
        cls.objects.get_or_create(plugin=plugin, command=command)
        # Why the row lock: a worker recording an outcome and a scheduler gating an enqueue may
        # change the same breaker at once; each must see the other's change, not overwrite it.
        return cls.objects.select_for_update().get(plugin=plugin, command=command)

    # -- state changes: one method each, a transition row for every change of state ------------

    def record_success(self, job_id: str, *, now: datetime) -> None:
        previous = self.state
        self._save(now, state=BreakerState.CLOSED, failure_count=0, opened_at=None, last_job_id=job_id)
        if previous != BreakerState.CLOSED:
            self._transition(previous, BreakerReason.SUCCESS, job_id, now)

    def record_failure(self, job_id: str, *, threshold: int, now: datetime) -> None:
        previous, count = self.state, self.failure_count + 1
        trips = previous == BreakerState.HALF_OPEN or (previous == BreakerState.CLOSED and count >= threshold)
        state = BreakerState.OPEN if trips else previous
        opened_at = now if trips else self.opened_at
        self._save(now, state=state, failure_count=count, opened_at=opened_at, last_failure_at=now, last_job_id=job_id)
        if trips:
            self._transition(previous, BreakerReason.FAILURE_THRESHOLD, job_id, now)

    def gate(self, *, reset_after: float, probe_finished: bool, now: datetime) -> Gate:
        """Whether a scheduled enqueue may go ahead. Open past its cooldown turns half-open and lets
        exactly one probe through; the caller records the probe's job id with `probe_sent`."""
        if self.state == BreakerState.CLOSED:
            return Gate.PASS
        if self.state == BreakerState.OPEN:
            if self.opened_at is None or now - self.opened_at < timedelta(seconds=reset_after):
                return Gate.BLOCKED
            self._save(now, state=BreakerState.HALF_OPEN, last_job_id=None)
            self._transition(BreakerState.OPEN, BreakerReason.COOLDOWN_ELAPSED, None, now)
            return Gate.PROBE
        # Half-open: one probe at a time. One that ended without an outcome reaching us (cancelled,
        # or never enqueued) is replaced rather than leaving the breaker stuck.
        return Gate.PROBE if self.last_job_id is None or probe_finished else Gate.BLOCKED

    def probe_sent(self, job_id: str, *, now: datetime) -> None:
        self._save(now, last_job_id=job_id)

    def reset(self, *, now: datetime, by: str) -> bool:
        """An operator's reset: closed with a zero count; False when it was closed already."""
        previous = self.state
        self._save(now, state=BreakerState.CLOSED, failure_count=0, opened_at=None)
        if previous == BreakerState.CLOSED:
            return False
        self._transition(previous, BreakerReason.MANUAL_RESET, None, now, actor=by)
        return True

    def _save(self, now: datetime, **changes: object) -> None:
        for name, value in changes.items():
            setattr(self, name, value)
        self.updated_at = now
        self.save(update_fields=[*changes, "updated_at"])

    def _transition(
        self, from_state: str, reason: str, job_id: str | None, now: datetime, actor: str | None = None
    ) -> None:
        CircuitBreakerTransition.objects.create(
            actor=actor,
            plugin=self.plugin,
            command=self.command,
            from_state=from_state,
            to_state=self.state,
            failure_count=self.failure_count,
            reason=reason,
            job_id=job_id,
            created_at=now,
        )


class CircuitBreakerTransitionQuerySet(PrunableQuerySet["CircuitBreakerTransition"]):
    def unannounced(self) -> CircuitBreakerTransitionQuerySet:
        return self.filter(announced=False)

    def expired(self, before: datetime) -> CircuitBreakerTransitionQuerySet:
        """Announced before `before`; one still to announce stays, however old, for its event."""
        return self.filter(announced=True, created_at__lt=before)

    def claim_unannounced(self, limit: int = 100) -> list[CircuitBreakerTransition]:
        """The oldest transitions no scheduler has announced yet, marked announced: each claimed by
        exactly one caller (compare-and-set per row). Call inside the announcing transaction."""
        claimed = []
        for row in self.unannounced().order_by("created_at", "id")[:limit]:
            with writing():
                if CircuitBreakerTransition.objects.filter(pk=row.pk, announced=False).update(announced=True):
                    claimed.append(row)
        return claimed


class CircuitBreakerTransition(models.Model):
    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    plugin = models.CharField(max_length=200)
    command = models.CharField(max_length=200)
    from_state = models.CharField(max_length=16, null=True, blank=True)
    to_state = models.CharField(max_length=16)
    failure_count = models.IntegerField(default=0)
    reason = models.CharField(max_length=32, choices=BreakerReason.choices)
    job_id = models.CharField(max_length=36, null=True, blank=True)
    # Who asked for a manual reset (`admin:alice`, `cli`); empty for the breaker's own changes.
    actor = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Whether the scheduler has sent its `scheduler.circuit_*` event (gateway.daemon.scheduler).
    announced = models.BooleanField(default=False)

    objects = CircuitBreakerTransitionQuerySet.as_manager()

    class Meta:
        db_table = "circuit_breaker_transitions"
        indexes = [
            # Read by `system breaker` (history per plugin, newest first).
            models.Index(fields=["plugin", "command", "created_at"], name="cb_transitions_target_idx"),
            # Read at every scheduler tick: the few transitions still to announce.
            models.Index(fields=["created_at"], name="cb_transitions_unannounced_idx", condition=Q(announced=False)),
        ]

    def __str__(self) -> str:
        return f"{self.plugin}.{self.command} {self.from_state} -> {self.to_state} ({self.reason})"


def record_scheduled_outcome(
    plugin: str, command: str, job_id: str, *, succeeded: bool, threshold: int, now: datetime | None = None
) -> None:
    """A scheduler-originated attempt ended: count it. Call inside the outcome's transaction."""
    now = now or timezone.now()
    with writing():
        breaker = CircuitBreaker.locked(plugin, command)
        if succeeded:
            breaker.record_success(job_id, now=now)
        else:
            breaker.record_failure(job_id, threshold=threshold, now=now)
