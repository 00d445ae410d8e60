"""The one place the ledger relies on Django's private connection state (its transaction
bookkeeping and its per-thread connection cache), so that a Django upgrade that changes it fails
one test, tests/ledger/test_django_internals.py, instead of corrupting transactions quietly.

Why the ledger touches them at all: its write transaction lends a process-wide SQLite connection to
the thread's Django connection and opens it without `transaction.atomic()`'s generality
(`ledger.writes.transaction`), and its hand-written statements look the thread's connection up
without asgiref's Local (`ledger.sql.current`): each saved ~20 µs of CPU per job, where a job's
whole ledger cost is about a millisecond (docs/performance.md). What is relied on, and nothing more:
- `transaction.Atomic` entering an outermost block sets `autocommit` False, `in_atomic_block`,
  `commit_on_exit` True, `needs_rollback` False and pushes itself on `atomic_blocks`; leaving it
  undoes them; a nested `atomic()` then takes a savepoint and `on_commit` queues its callback.
- `run_and_clear_commit_hooks()` runs what `on_commit` queued; `run_on_commit` holds it;
  `errors_occurred` is what `close_if_unusable_or_obsolete` reads after an error.
- Django's test cases mark the transactions they wrap a test in with `_from_testcase`.
- `connections._connections` is replaced when the set of connections is (a settings change).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

# Stands in `atomic_blocks` for a block opened by hand, as its Atomic would (never entered).
_OUTERMOST = transaction.Atomic(DEFAULT_DB_ALIAS, savepoint=False, durable=False)


def connection_set() -> object:
    """What identifies the current set of connections: a per-thread cache of one is valid while
    this is the same object."""
    return connections._connections  # type: ignore[attr-defined]


def in_transaction(conn: BaseDatabaseWrapper) -> bool:
    return bool(conn.in_atomic_block)


def only_test_transactions(conn: BaseDatabaseWrapper) -> bool:
    """No transaction is open, or only the ones a test case wraps every test in: those never reach
    another process's writers."""
    return not conn.in_atomic_block or all(getattr(block, "_from_testcase", False) for block in conn.atomic_blocks)


def enter_outermost(conn: BaseDatabaseWrapper) -> None:
    """Django's state for an outermost `atomic()` block whose BEGIN the caller has sent."""
    conn.autocommit = False
    conn.in_atomic_block = True
    conn.commit_on_exit = True
    conn.needs_rollback = False
    conn.atomic_blocks.append(_OUTERMOST)


def leave_outermost(conn: BaseDatabaseWrapper) -> bool:
    """Back to autocommit; whether the block may commit (no nested block marked it for rollback)."""
    conn.atomic_blocks.pop()
    conn.in_atomic_block = False
    conn.autocommit = True
    return not conn.needs_rollback


def mark_for_rollback(conn: BaseDatabaseWrapper) -> None:
    """What `atomic(savepoint=False)` does inside another block when its body raises."""
    conn.needs_rollback = True


def forget_transaction(conn: BaseDatabaseWrapper) -> None:
    """After a rollback: nothing to roll back any more, and the queued commit hooks never run."""
    conn.needs_rollback = False
    conn.run_on_commit = []


def after_commit(conn: BaseDatabaseWrapper) -> None:
    """After a COMMIT: the connection is sound, and what `on_commit` queued runs."""
    conn.errors_occurred = False
    conn.run_and_clear_commit_hooks()


@contextmanager
def lent(conn: BaseDatabaseWrapper, raw: Any) -> Iterator[None]:
    """`conn` talks through the DB-API connection `raw` for the block, then through its own again."""
    own, conn.connection = conn.connection, raw
    try:
        yield
    finally:
        conn.connection = own
