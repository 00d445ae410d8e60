"""`api.max_concurrent_sync`: at most N synchronous callers wait at once across every API process
on this host (gunicorn runs several); the next gets 429 (spec 000 §9.5).

Each slot is a lock file taken with a non-blocking `flock`: the kernel releases it when the
holder's process dies, so a crashed worker never leaks a slot.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Busy(Exception):
    """Every slot is taken."""


@contextmanager
def sync_slot(directory: Path, limit: int) -> Iterator[int]:
    directory.mkdir(parents=True, exist_ok=True)
    for slot in range(limit):
        fd = os.open(directory / f"sync-slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield slot
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    raise Busy
