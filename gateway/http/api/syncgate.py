"""`api.max_concurrent_sync`: at most N synchronous callers wait at once across every API process
on this host (gunicorn runs several); the next gets 429 (spec 000 §9.5).

Each slot is a lock file taken with a non-blocking `flock`: the kernel releases it when the
holder's process dies, so a crashed worker never leaks a slot. A caller that closes its
connection gives its slot back at once (`caller_gone`), not at its timeout.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Busy(Exception):
    """Every slot is taken."""


@contextmanager
def sync_slot(directory: Path, limit: int) -> Iterator[int]:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # the state directory's own mode (spec 000 §13.2)
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


def caller_gone(environ: Mapping[str, Any]) -> Callable[[], bool] | None:
    """Whether the caller of this request closed its connection, for a synchronous wait to end
    early; None where the server gives no socket (the in-process test client). One non-blocking
    peek: a closed connection reads as the end of the stream (or a reset), an open one has nothing
    to read, or the start of its next request."""
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, socket.socket):
        return None

    def gone() -> bool:
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:  # reset by the peer, or closed under us
            return True

    return gone
