"""The lease of a job run in the foreground (`ductile plugin run`), kept while it runs.

A worker daemon renews its jobs' leases from its main loop (gateway.execution.workers). A CLI
call that runs its job itself has no such loop: a job longer than `service.lease_ttl` was taken
over by any daemon's recovery pass (its lease had run out), given its next attempt or ended
`dead`, and the CLI's own result was refused as a lost owner's."""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from django.db import DatabaseError, connection
from django.utils import timezone

from ledger.models import Job, WorkerInstance
from ledger.models.workers import beat_every

log = logging.getLogger("ductile.workers")


class LeaseKeeper:
    """While the `with` block runs: `job_id`'s lease renewed, and `worker`'s heartbeat, every
    quarter lease (as a daemon's), on a thread of its own."""

    def __init__(self, worker: WorkerInstance, job_id: str, lease_ttl: float):
        self.worker, self.job_id, self.lease_ttl = worker, job_id, lease_ttl
        self.every = beat_every(lease_ttl)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ductile-lease", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.every):
                try:
                    Job.objects.heartbeat(self.worker.id, [self.job_id], self.lease_ttl)
                    self.worker.beat(timezone.now())
                except DatabaseError as exc:
                    # The next beat may work; the lease has three more quarters to go meanwhile.
                    log.warning("could not renew the lease of job %s: %s", self.job_id, exc)
        finally:
            connection.close()  # this thread's own
