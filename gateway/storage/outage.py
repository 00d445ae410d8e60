"""Riding out a database that refuses work (a full disk, read-only files, a server restarting, a
lock held too long): a daemon's loop keeps running, retries with a growing delay, and says so in
the log once when the trouble starts, now and then while it lasts, and once when it ends, instead
of a traceback at every attempt (on a full disk, the log may share that disk)."""

from __future__ import annotations

import logging
import threading
import time

from gateway.storage.database import storage_refusal, unavailable_reason

# While an outage lasts, a reminder at most this often (seconds).
REMIND_EVERY = 60.0


class Outage:
    """One kind of database work (the heartbeat, claims, a scheduler tick) failing again and
    again. `failed` returns how long to wait before the next try: `floor`, doubling at each
    failure up to `ceiling`. Safe to share between threads."""

    def __init__(self, what: str, log: logging.Logger, *, floor: float, ceiling: float):
        self.what = what
        self.log = log
        self.floor, self.ceiling = floor, max(floor, ceiling)
        self.failures = 0
        self._lock = threading.Lock()
        self._since = self._reminded = 0.0

    def failed(self, exc: BaseException) -> float:
        now = time.monotonic()
        with self._lock:
            self.failures += 1
            delay = min(self.floor * 2 ** (self.failures - 1), self.ceiling)
            if self.failures == 1:
                self._since = self._reminded = now
                refused = storage_refusal(exc) is not None
                # The traceback once, for whoever debugs it; a full disk or read-only files need none.
                self.log.error(
                    "%s failed: the database %s; retrying with backoff (up to every %.0fs) until it works again",
                    self.what,
                    ("refuses writes: " if refused else "failed: ") + unavailable_reason(exc),
                    self.ceiling,
                    exc_info=None if refused else exc,
                )
            elif now - self._reminded >= REMIND_EVERY:
                self._reminded = now
                self.log.error(
                    "%s still failing after %.0fs (%d attempts): %s",
                    self.what,
                    now - self._since,
                    self.failures,
                    unavailable_reason(exc),
                )
            return delay

    def recovered(self) -> None:
        if not self.failures:  # the usual case, read without the lock: one attribute load
            return
        with self._lock:
            if self.failures:
                self.log.warning(
                    "%s works again after %.0fs (%d failed attempts)",
                    self.what,
                    time.monotonic() - self._since,
                    self.failures,
                )
                self.failures = 0
