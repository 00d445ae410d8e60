"""Caps on open event streams (`/events`, the dashboard's): `api.max_streams` in all and
`api.max_streams_per_token` for one holder (an API token's name, a console user), counted across
every API process of this host.

Why a file: the API is several gunicorn processes, and a cap one process counts alone lets each
holder open that many per process. The counts live in one small JSON file beside the PID lock (and the state database),
{pid: {holder: count}}, read and rewritten under an exclusive flock at each stream's start and
end (streams open rarely; this costs well under a millisecond). A process that died without
giving its seats back is forgotten at the next look, its PID no longer alive.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledger.models.workers import pid_alive

FILE_NAME = "ductile.streams"


@dataclass(frozen=True)
class Refusal:
    status: int  # 429: this holder has its share; 503: the server has no seat left
    message: str


class Seats:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # flock is per open file; threads of one process queue here

    def take(self, holder: str, *, per_holder: int, total: int) -> Callable[[], None] | Refusal:
        """A seat for `holder`, as the function that gives it back (once); or why not."""
        with self._counts() as counts:
            held = sum(n for seats in counts.values() for n in seats.values())
            mine = sum(seats.get(holder, 0) for seats in counts.values())
            if mine >= per_holder:
                return Refusal(
                    429, f"{holder} already has {mine} open streams (api.max_streams_per_token: {per_holder})"
                )
            if held >= total:
                return Refusal(503, f"the server has {held} open streams (api.max_streams: {total}); try again later")
            own = counts.setdefault(str(os.getpid()), {})
            own[holder] = own.get(holder, 0) + 1
        given_back = threading.Event()

        def give_back() -> None:
            if given_back.is_set():
                return
            given_back.set()
            with self._counts() as counts:
                own = counts.get(str(os.getpid()), {})
                if own.get(holder, 0) > 1:
                    own[holder] -= 1
                else:
                    own.pop(holder, None)

        return give_back

    def _counts(self) -> _Counts:
        return _Counts(self)


class _Counts:
    """The file's counts, for one read-modify-write under the lock; dead processes' seats dropped."""

    def __init__(self, seats: Seats) -> None:
        self.seats = seats
        self.fd = -1
        self.counts: dict[str, dict[str, int]] = {}

    def __enter__(self) -> dict[str, dict[str, int]]:
        self.seats._lock.acquire()
        try:
            self.seats.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.seats.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            raw = os.read(self.fd, 1 << 20)
            try:
                loaded = json.loads(raw) if raw else {}
            except ValueError:
                loaded = {}  # a torn or foreign file: start the count over
            self.counts = {
                pid: {str(k): int(v) for k, v in seats.items()}
                for pid, seats in (loaded.items() if isinstance(loaded, dict) else ())
                if pid.isdigit() and isinstance(seats, dict) and pid_alive(int(pid))
            }
        except BaseException:
            self._release()
            raise
        return self.counts

    def __exit__(self, *exc: object) -> None:
        try:
            data = json.dumps({pid: seats for pid, seats in self.counts.items() if seats}).encode()
            os.lseek(self.fd, 0, os.SEEK_SET)
            os.write(self.fd, data)
            os.ftruncate(self.fd, len(data))
        finally:
            self._release()

    def _release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # and with it the flock
            self.fd = -1
        self.seats._lock.release()


_SEATS: dict[Path, Seats] = {}


def seats_beside(state_path: Path) -> Seats:
    """The seats of the gateway whose state database is `state_path` (beside it, with its PID lock)."""
    path = state_path.parent / FILE_NAME
    return _SEATS.setdefault(path, Seats(path))
