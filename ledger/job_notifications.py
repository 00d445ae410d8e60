"""What the ledger announces when a job is enqueued or finishes, for advisory wake-ups: idle
workers when a job is enqueued, tree waiters when a job finishes. Other processes on the same host
hear it through gateway/storage/wake_listener.py.

Correctness never depends on them: workers and waiters re-check the database on a short bounded
interval. PostgreSQL gets a NOTIFY inside the transaction (delivered at commit, to every node);
in-process and same-host listeners are called after commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import connection

from ledger.writes.transaction import after_release

ENQUEUED = "ductile_jobs"
FINISHED = "ductile_done"
_listeners: dict[str, list[Callable[[], None]]] = {ENQUEUED: [], FINISHED: []}
# Called at the notify, inside the transaction, rather than after it (see `add_listener`).
_at_once: dict[str, list[Callable[[], None]]] = {ENQUEUED: [], FINISHED: []}


def add_listener(listener: Callable[[], None], channel: str = ENQUEUED, *, at_once: bool = False) -> None:
    """`at_once`: called when the transaction notifies, before its commit, for a listener whose
    wake-up takes longer than the commit and whose waiter then waits for the write gate anyway
    (another process's idle workers: they wake while the commit is under way)."""
    table = _at_once if at_once else _listeners
    if listener not in table[channel]:
        table[channel].append(listener)


def remove_listener(listener: Callable[[], None], channel: str = ENQUEUED) -> None:
    for table in (_listeners, _at_once):
        if listener in table[channel]:
            table[channel].remove(listener)


def _call(listeners: list[Callable[[], None]]) -> None:
    for listener in list(listeners):
        try:
            listener()
        except Exception:  # a wake-up is advice; the bounded re-check still sees the change
            pass


def _call_listeners(channel: str) -> None:
    """The listeners called after the commit and the gate's release."""
    _call(_listeners[channel])


def _notify(channel: str) -> None:
    """Call inside the transaction that makes the change."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {channel}")
    _call(_at_once[channel])
    tally: EnqueueTally | None = getattr(_tallies, "current", None)
    if channel == ENQUEUED and tally is not None:
        tally.enqueued += 1
        return
    after_release(lambda: _call_listeners(channel))


_tallies = threading.local()


class EnqueueTally:
    """The jobs a transaction enqueued, whose in-process wake-up waits for `release`."""

    def __init__(self) -> None:
        self.enqueued = 0

    def release(self, *, taken: int) -> None:
        """Inside the transaction, after its writer claimed `taken` of the jobs it enqueued: the
        idle threads of this process are woken once after the commit if any job is left for them.
        Why: a worker that routes a pipeline's next step and claims it in the same transaction
        would otherwise wake an idle thread that looks, finds nothing, and takes the GIL from the
        worker as it starts the step's plugin (docs/performance-history.md, item 35)."""
        if self.enqueued > taken:
            after_release(lambda: _call_listeners(ENQUEUED))


@contextmanager
def tallying_enqueues() -> Iterator[EnqueueTally]:
    """Within: this thread's enqueues still notify PostgreSQL and other processes at once, but
    their in-process wake-up is counted on the tally, for its `release` to send or not."""
    previous = getattr(_tallies, "current", None)
    _tallies.current = tally = EnqueueTally()
    try:
        yield tally
    finally:
        _tallies.current = previous


def notify_enqueued() -> None:
    _notify(ENQUEUED)


def notify_finished() -> None:
    """A job reached a terminal status: whoever waits on its tree re-checks it."""
    _notify(FINISHED)
