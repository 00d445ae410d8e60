"""Circuit breakers per (plugin, command) with a controlled clock: the spec 000 §5.8 sequence
3 failures -> open -> cooldown -> one probe -> close / re-open, every change a transition row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from ledger.models import BreakerState, CircuitBreaker, CircuitBreakerTransition, Gate
from ledger.models.breakers import record_scheduled_outcome

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

T0 = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
RESET_AFTER = 1800.0


def fail(job_id, at, threshold=3):
    record_scheduled_outcome("web", "poll", job_id, succeeded=False, threshold=threshold, now=at)


def succeed(job_id, at):
    record_scheduled_outcome("web", "poll", job_id, succeeded=True, threshold=3, now=at)


def gate(at, probe_finished=False):
    with transaction.atomic():
        return CircuitBreaker.locked("web", "poll").gate(reset_after=RESET_AFTER, probe_finished=probe_finished, now=at)


def breaker():
    return CircuitBreaker.objects.get(plugin="web", command="poll")


def history():
    rows = CircuitBreakerTransition.objects.filter(plugin="web").order_by("created_at", "to_state")
    return [(r.from_state, r.to_state, r.reason, r.job_id) for r in rows]


def test_threshold_failures_open_cooldown_lets_one_probe_and_its_failure_reopens():
    fail("j1", T0)
    fail("j2", T0 + timedelta(minutes=5))
    assert breaker().state == BreakerState.CLOSED and breaker().failure_count == 2
    assert gate(T0 + timedelta(minutes=6)) == Gate.PASS
    fail("j3", T0 + timedelta(minutes=10))
    opened = T0 + timedelta(minutes=10)
    assert (breaker().state, breaker().failure_count, breaker().opened_at) == (BreakerState.OPEN, 3, opened)
    assert gate(opened + timedelta(minutes=29)) == Gate.BLOCKED
    # Cooldown over: half-open, and exactly one probe goes through.
    assert gate(opened + timedelta(minutes=30)) == Gate.PROBE
    with transaction.atomic():
        CircuitBreaker.locked("web", "poll").probe_sent("probe-1", now=opened + timedelta(minutes=30))
    assert gate(opened + timedelta(minutes=31)) == Gate.BLOCKED
    fail("probe-1", opened + timedelta(minutes=32))
    assert breaker().state == BreakerState.OPEN and breaker().opened_at == opened + timedelta(minutes=32)
    assert history() == [
        ("closed", "open", "failure_threshold", "j3"),
        ("open", "half_open", "cooldown_elapsed", None),
        ("half_open", "open", "failure_threshold", "probe-1"),
    ]


def test_a_successful_probe_closes_and_resets_the_count():
    for n in range(3):
        fail(f"j{n}", T0 + timedelta(minutes=n))
    assert gate(T0 + timedelta(hours=1)) == Gate.PROBE
    succeed("probe", T0 + timedelta(hours=1, minutes=1))
    assert (breaker().state, breaker().failure_count) == (BreakerState.CLOSED, 0)
    assert history()[-1] == ("half_open", "closed", "success", "probe")
    # A success in between resets the run of failures: two more failures do not open it.
    fail("k1", T0 + timedelta(hours=2))
    fail("k2", T0 + timedelta(hours=2, minutes=1))
    assert breaker().state == BreakerState.CLOSED


def test_a_probe_that_never_reported_is_replaced_rather_than_blocking_forever():
    for n in range(3):
        fail(f"j{n}", T0)
    assert gate(T0 + timedelta(hours=1)) == Gate.PROBE
    with transaction.atomic():
        CircuitBreaker.locked("web", "poll").probe_sent("lost-probe", now=T0 + timedelta(hours=1))
    assert gate(T0 + timedelta(hours=2), probe_finished=True) == Gate.PROBE


def test_manual_reset_closes_with_a_transition_naming_who_and_is_a_no_op_when_closed():
    for n in range(3):
        fail(f"j{n}", T0)
    (reset,) = CircuitBreaker.objects.filter(plugin="web").reset(by="admin:alice", now=T0 + timedelta(minutes=1))
    assert (reset.command, breaker().state, breaker().failure_count) == ("poll", BreakerState.CLOSED, 0)
    assert history()[-1] == ("open", "closed", "manual_reset", None)
    last = CircuitBreakerTransition.objects.filter(plugin="web").latest("created_at")
    assert last.actor == "admin:alice"
    assert CircuitBreaker.objects.filter(plugin="web").reset(by="cli", now=T0 + timedelta(minutes=2)) == []
    assert len(history()) == 2


def test_the_threshold_is_per_plugin_config():
    fail("j1", T0, threshold=1)
    assert breaker().state == BreakerState.OPEN
