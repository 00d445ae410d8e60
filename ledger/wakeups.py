"""Advisory wake-ups: idle workers when a job is enqueued, tree waiters when a job finishes.

Correctness never depends on them: workers and waiters re-check the database on a short bounded
interval. PostgreSQL gets a NOTIFY inside the transaction (delivered at commit, to every node);
in-process and same-host listeners are called after commit.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection

from ledger.writes import after_release

ENQUEUED = "ductile_jobs"
FINISHED = "ductile_done"
_listeners: dict[str, list[Callable[[], None]]] = {ENQUEUED: [], FINISHED: []}


def add_listener(listener: Callable[[], None], channel: str = ENQUEUED) -> None:
    if listener not in _listeners[channel]:
        _listeners[channel].append(listener)


def remove_listener(listener: Callable[[], None], channel: str = ENQUEUED) -> None:
    if listener in _listeners[channel]:
        _listeners[channel].remove(listener)


def _call_listeners(channel: str) -> None:
    for listener in list(_listeners[channel]):
        try:
            listener()
        except Exception:  # a wake-up is advice; the bounded re-check still sees the change
            pass


def _notify(channel: str) -> None:
    """Call inside the transaction that makes the change."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {channel}")
    after_release(lambda: _call_listeners(channel))


def notify_enqueued() -> None:
    _notify(ENQUEUED)


def notify_finished() -> None:
    """A job reached a terminal status: whoever waits on its tree re-checks it."""
    _notify(FINISHED)
