"""Advisory wake-ups for idle workers when a job is enqueued.

Correctness never depends on them: workers re-check the database on a short bounded interval.
PostgreSQL gets a NOTIFY inside the enqueuing transaction (delivered at commit, to every node);
in-process and same-host listeners are called after commit.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection, transaction

CHANNEL = "ductile_jobs"
_listeners: list[Callable[[], None]] = []


def add_listener(listener: Callable[[], None]) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def remove_listener(listener: Callable[[], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def _call_listeners() -> None:
    for listener in list(_listeners):
        try:
            listener()
        except Exception:  # a wake-up is advice; the bounded re-check still finds the job
            pass


def notify_enqueued() -> None:
    """Call inside the enqueuing transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"NOTIFY {CHANNEL}")
    transaction.on_commit(_call_listeners)
