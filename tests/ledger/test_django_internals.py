"""Pins what `ledger.django_internals` relies on in Django's private connection state. A Django
upgrade that changes how `transaction.atomic()` keeps its books fails here, by name, instead of
leaving the ledger's hand-opened write transaction subtly different from Atomic's."""

from __future__ import annotations

from typing import Any

import django
import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from ledger import django_internals as internals

# The state Atomic keeps on a connection, and that the ledger sets by hand.
WATCHED = ("autocommit", "in_atomic_block", "commit_on_exit", "needs_rollback", "savepoint_ids", "run_on_commit")


def state() -> dict[str, Any]:
    return {name: getattr(connection, name) for name in WATCHED} | {"blocks": len(connection.atomic_blocks)}


def every_attribute() -> dict[str, Any]:
    """The connection's whole instance state that is plain data (what Atomic could set)."""
    return {k: v for k, v in vars(connection).items() if isinstance(v, bool | int | str | type(None))}


def test_the_django_series_is_the_one_pinned() -> None:
    """Reading this module again is due when Django's minor version changes."""
    assert django.VERSION[:2] == (5, 2)


@pytest.mark.django_db(transaction=True)
def test_an_outermost_block_opened_by_hand_leaves_the_state_atomic_leaves() -> None:
    connection.ensure_connection()
    before_everything = every_attribute()
    with transaction.atomic():
        by_atomic, by_atomic_all = state(), every_attribute()
    connection.ensure_connection()
    connection.set_autocommit(False)  # what BEGIN comes to on the lent connection
    connection.autocommit = True  # the ledger keeps Django's flag and sends BEGIN itself
    internals.enter_outermost(connection)
    try:
        by_hand, by_hand_all = state(), every_attribute()
    finally:
        assert internals.leave_outermost(connection) is True
        connection.rollback()
        connection.set_autocommit(True)
    assert by_hand == by_atomic
    # Nothing else Atomic sets on entry (a new flag in a Django release would show up here).
    changed_by_atomic = {k for k in by_atomic_all if by_atomic_all[k] != before_everything.get(k)}
    changed_by_hand = {k for k in by_hand_all if by_hand_all[k] != before_everything.get(k)}
    assert changed_by_atomic <= changed_by_hand | {"savepoint_state"}, changed_by_atomic - changed_by_hand
    assert state() == {**by_atomic, "autocommit": True, "in_atomic_block": False, "blocks": 0}


@pytest.mark.django_db(transaction=True)
def test_inside_a_block_opened_by_hand_atomic_nests_and_on_commit_queues() -> None:
    connection.ensure_connection()
    connection.set_autocommit(False)
    connection.autocommit = True
    internals.enter_outermost(connection)
    ran: list[str] = []
    try:
        with transaction.atomic():  # a savepoint, as inside any outermost block
            assert len(connection.savepoint_ids) == 1
            transaction.on_commit(lambda: ran.append("hook"))
        with pytest.raises(RuntimeError), transaction.atomic(savepoint=False):
            raise RuntimeError("marks the whole transaction")
        assert connection.needs_rollback is True
        assert ran == []
    finally:
        assert internals.leave_outermost(connection) is False  # marked for rollback: no commit
        connection.rollback()
        connection.set_autocommit(True)
    internals.forget_transaction(connection)
    assert connection.run_on_commit == [] and connection.needs_rollback is False


@pytest.mark.django_db(transaction=True)
def test_commit_hooks_run_through_the_name_the_adapter_calls() -> None:
    ran: list[int] = []
    connection.ensure_connection()
    connection.set_autocommit(False)
    connection.autocommit = True
    internals.enter_outermost(connection)
    transaction.on_commit(lambda: ran.append(1))
    assert internals.leave_outermost(connection) is True
    connection.commit()
    connection.set_autocommit(True)
    connection.errors_occurred = True
    internals.after_commit(connection)
    assert ran == [1] and connection.errors_occurred is False


@pytest.mark.django_db
def test_a_test_case_marks_its_transaction_and_only_that_one() -> None:
    assert connection.in_atomic_block and internals.only_test_transactions(connection)
    with transaction.atomic():
        assert not internals.only_test_transactions(connection)


def test_the_set_of_connections_is_the_per_thread_store_of_each_alias() -> None:
    """`ledger.sql.current` keeps a thread's connection while this store is the same object."""
    store = internals.connection_set()
    assert internals.connection_set() is store
    assert getattr(store, DEFAULT_DB_ALIAS) is connections[DEFAULT_DB_ALIAS]
    assert "_connections" in vars(connections)


def test_lending_a_connection_gives_the_own_one_back_even_after_an_error() -> None:
    own = connection.connection
    with pytest.raises(ValueError), internals.lent(connection, object()):
        raise ValueError
    assert connection.connection is own
