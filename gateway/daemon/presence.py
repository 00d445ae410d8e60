"""A node's row for the roles that claim no jobs: a `system start` supervisor (its listeners, its
resident scheduler, housekeeping) and a standalone `runscheduler` are listed among the cluster's
nodes (`system status`, `GET /system/nodes`, the console, the dashboard) with their roles, and
`system migrate-ledger` sees them running. A worker daemon keeps its own row
(gateway.execution.workers); this one is never counted as claiming anything
(`WorkerInstanceQuerySet.workers`).

Why a row of its own rather than nothing: an API-only node or the one scheduler of a cluster was
invisible, so an operator could not tell a node that was down from one that was never there."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from gateway.storage.outage import Outage
from gateway.version import gateway_version
from ledger.models import WorkerInstance
from ledger.models.workers import beat_every

log = logging.getLogger("ductile.presence")


class Presence:
    """The row of one process taking `roles`: made by `enter`, its heartbeat kept by `beat` (call
    it at every pass; it writes when one is due), marked stopped by `leave`. A database that
    refuses (an outage) is ridden out: the row is made at the first beat that works."""

    def __init__(self, roles: Iterable[str], lease_ttl: float):
        self.roles = ",".join(sorted(roles))
        self.hostname = socket.gethostname()
        self.id = f"{self.hostname}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.every = beat_every(lease_ttl)  # as a worker daemon's
        self._row: WorkerInstance | None = None
        self._next = 0.0
        self._down = Outage(f"the {self.roles} node's heartbeat", log, floor=1.0, ceiling=self.every)

    def beat(self) -> float:
        """The heartbeat when due (the row first, if not made yet); seconds until the next."""
        now = time.monotonic()
        if now < self._next:
            return self._next - now
        try:
            close_old_connections()  # one an outage broke is replaced, not failed on for ever
            if self._row is None:
                self._row = WorkerInstance.objects.register(
                    self.id,
                    hostname=self.hostname,
                    pid=os.getpid(),
                    threads=0,
                    plugins="",
                    version=gateway_version(),
                    roles=self.roles,
                )
            else:
                self._row.beat(timezone.now())
        except DatabaseError as exc:
            wait = self._down.failed(exc)
        else:
            self._down.recovered()
            wait = self.every
        self._next = now + wait
        return wait

    def leave(self) -> None:
        if self._row is None:
            return
        try:
            self._row.stop(timezone.now())
        except DatabaseError as exc:
            # Its heartbeat stops either way: the node is listed as lost after a lease.
            log.warning("could not mark the %s node %s stopped: %s", self.roles, self.id, exc)
