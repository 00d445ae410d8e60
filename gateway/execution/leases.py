"""How long a worker's leases last, as far as the worker knows without asking the database: what a
finished outcome that cannot be recorded (the database is down) may wait for.

A claim sets a job's lease (`Job.lease_until`); each heartbeat that commits renews the leases of
the jobs then in flight. A heartbeat that fails renews nothing, which does not mean the lease is
lost: nobody can recover a job while the database is down either, and once it is back the
compare-and-set on `claimed_by` decides whose the job is. Only past the last lease known to be
granted may another worker have taken the job.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from datetime import datetime

from ledger.models import Job


class Leases:
    """The latest lease a committed heartbeat granted, and to which jobs. Safe between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._renewed: tuple[datetime | None, frozenset[str]] = (None, frozenset())

    def renewed(self, job_ids: Collection[str], until: datetime) -> None:
        """A heartbeat committed: `job_ids` (those of this worker still running) hold until `until`."""
        with self._lock:
            self._renewed = (until, frozenset(job_ids))

    def until(self, job: Job, claimed_until: datetime) -> datetime:
        """When `job`'s lease ends at the latest: its claim's (`claimed_until`), or a later heartbeat's."""
        with self._lock:
            until, ids = self._renewed
        return until if until is not None and job.id in ids and until > claimed_until else claimed_until
