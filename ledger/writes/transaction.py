"""`writing()`: every write transaction of the ledger, behind the write gate (`ledger.writes.gate`).

`writing()` is the only way the ledger's write methods open a transaction, so no caller can forget
the gate: it takes the gate, then the transaction, and releases the gate after the transaction
(and its commit hooks) ended; what `after_release` was given runs after that. It is re-entrant: a
write method called inside another (children enqueued by a completion) or inside a caller's own
`writing()` block (several jobs in one transaction) joins that transaction. A write inside a
transaction opened *without* the gate is refused: that transaction already holds SQLite's write
lock, and waiting for the gate while holding it would deadlock against a process holding the gate
and waiting for the lock.

PostgreSQL has row locks and no such handler: there, as on an in-memory SQLite database (which no
other process can open), `writing()` is `transaction.atomic()` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ledger import django_internals as django
from ledger.sql import current
from ledger.writes import autocheckpoint, write_connection
from ledger.writes.gate import database_file, gate, held


def after_release(callback: Callable[[], None]) -> None:
    """Run `callback` once the current write transaction has committed and the gate is released;
    never when it rolls back. For wake-up pokes: they need no lock, and run inside the gate they
    lengthened every other writer's wait (docs/performance-history.md, "API while workers drain")."""
    pending: list[Callable[[], None]] | None = getattr(held, "after", None)
    if pending is None:  # no gate here (PostgreSQL, an in-memory database): after the commit
        transaction.on_commit(callback)
    else:
        transaction.on_commit(lambda: pending.append(callback))


class UngatedTransaction(RuntimeError):
    """A ledger write inside a transaction that was opened without `writing()`."""


_BEGIN: dict[str | None, str] = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")}


@contextmanager
def _lent_transaction(conn: BaseDatabaseWrapper, database: str) -> Iterator[None]:
    """A transaction on this process's one write connection (`ledger.writes.write_connection`),
    lent to the thread's Django connection for its length (call under the gate). A transaction
    that failed on the lent connection closes it; the next gets a new one.

    The transaction is what `transaction.atomic()` makes of an outermost block, without its
    generality: BEGIN, then COMMIT (ROLLBACK on an error, or when a nested block marked the
    transaction for rollback), then the commit hooks. Django's connection state is set as Atomic
    sets it (`ledger.django_internals`), so nested `atomic()` blocks take savepoints and
    `on_commit` queues its callbacks as they would. Why: Atomic's enter and exit go through
    Django's cursor and its autocommit bookkeeping, ~20 µs of CPU per write transaction, one per
    job (docs/performance-history.md, item 29). Not inside a test case's transaction (`writing`
    then uses `atomic()`): the test's writes must stay on the connection that holds it."""
    raw = None
    committed = False
    try:
        raw = write_connection.take(conn)
        write_connection.checkpoint_at(conn, raw, autocheckpoint.pages_for_next_commit(database))
        with django.lent(conn, raw):
            try:
                with conn.wrap_database_errors:
                    raw.execute(_BEGIN.get(getattr(conn, "transaction_mode", None), "BEGIN"))
                django.enter_outermost(conn)
                try:
                    yield
                finally:
                    may_commit = django.leave_outermost(conn)
                if may_commit:
                    with conn.wrap_database_errors:
                        raw.commit()
                    committed = True
            finally:
                if not committed:
                    django.forget_transaction(conn)
    except DatabaseError:
        write_connection.drop()
        raise
    finally:
        if not committed and raw is not None:
            # Rolled back before anything else, a closed connection included: a statement of the
            # failed transaction that is still referenced (by its cursor, in the error's traceback,
            # which may live until a garbage collection) keeps close() from closing, and with it
            # the transaction and its write lock (every later writer waited out its busy timeout).
            try:
                raw.rollback()
            except Exception:  # the error that ended the transaction is the one to report
                write_connection.drop()
            if write_connection.dropped():  # after a database error, or a failed rollback
                write_connection.close_quietly(raw)
    if committed:
        django.after_commit(conn)
        if autocheckpoint.counting is not None:
            autocheckpoint.counting()


@contextmanager
def writing(*, savepoint: bool = True) -> Iterator[None]:
    """One write transaction of the ledger, behind the gate (module docstring). Inside another,
    a savepoint lets the caller catch this block's error and go on; `savepoint=False` for a write
    whose error ends the whole transaction anyway (the per-job path: a savepoint is two more
    statements through Django's cursor, measured at ~90 µs of CPU per job)."""
    if getattr(held, "depth", 0):
        held.depth += 1
        try:
            if savepoint:
                with transaction.atomic():
                    yield
            else:
                # What `atomic(savepoint=False)` inside another block comes to, without its
                # bookkeeping (two of them per job): on an error, the whole transaction must roll back.
                try:
                    yield
                except BaseException:
                    django.mark_for_rollback(current())
                    raise
        finally:
            held.depth -= 1
        return
    conn = current()
    if not django.only_test_transactions(conn):
        raise UngatedTransaction(
            "a ledger write inside a transaction opened without ledger.writes.transaction.writing(): open it "
            "with writing() so the SQLite write gate is taken before the transaction takes the write lock"
        )
    database = database_file(conn)
    held.depth = 1
    try:
        if database is None:
            with transaction.atomic():
                yield
            return
        after: list[Callable[[], None]] = []
        held.after = after
        with gate(database):
            if django.in_transaction(conn):  # a test case's transaction (above): a savepoint in it
                with transaction.atomic():
                    yield
            else:
                with _lent_transaction(conn, database):
                    yield
        for callback in after:  # filled by the commit's hooks only: empty after a rollback
            callback()
    finally:
        held.depth = 0
        held.after = None
