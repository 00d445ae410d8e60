"""PostgreSQL connections the server ended while they sat idle (a restart, `pg_terminate_backend`),
dropped before a request uses them.

A server that ends a connection sends its reason and closes the socket, so an idle connection's
socket turns readable; a healthy idle connection's never does (this process LISTENs on none of
them: gateway.storage.wake_listener has its own). Django checks a connection only after an error on it
(`close_if_unusable_or_obsolete`), so without this each API request thread's first read after a
restart failed with a 503. Django's own check (`CONN_HEALTH_CHECKS`) sends `SELECT 1` at the
first use in each request: a round trip per request on a healthy database, where this is one
`poll` of a socket, no query. A connection that fails without a word (a network partition) is
still found by its first error, as before.
"""

from __future__ import annotations

import select
from typing import Any

from django.db import connections

from ledger.django_internals import in_transaction


def drop_connections_the_server_ended(**_: Any) -> None:
    """For `request_started`: close this thread's idle PostgreSQL connections whose server spoke
    out of turn; the request's first query then opens a new one."""
    for conn in connections.all(initialized_only=True):
        raw = conn.connection
        if raw is None or conn.vendor != "postgresql" or in_transaction(conn):
            continue
        if raw.closed or _readable(raw.fileno()):
            conn.close()


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
