"""A daemon's sleep between passes that ends at once when something happens: a signal arrives, or
another thread says so (a worker thread that ended).

Why not a short fixed sleep: an idle daemon's CPU is its wake-ups, and on a small VM each costs
far more than the work it does (docs/performance-history.md item 31), so the passes are spaced as far as
their duties allow and whatever cannot wait wakes the sleeper.
"""

from __future__ import annotations

import os
import select
import signal
import threading


class Pause:
    """A pipe the sleeper waits on. With `signals` (from the main thread only), the interpreter
    writes to it when any signal with a Python handler arrives (`signal.set_wakeup_fd`); the
    handler itself still runs, in the main thread, as the sleep ends."""

    def __init__(self, *, signals: bool) -> None:
        self._read, self._write = os.pipe()
        # `wake` may come from another thread as the sleeper closes: never onto a closed (or by
        # then reused) descriptor.
        self._closing = threading.Lock()
        self._closed = False
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._signals = signals
        if signals:
            signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)

    def sleep(self, seconds: float) -> bool:
        """Up to `seconds`; whether something ended it early."""
        ready, _, _ = select.select([self._read], [], [], max(seconds, 0.0))
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass
        return bool(ready)

    def wake(self) -> None:
        with self._closing:
            if self._closed:
                return
            try:
                os.write(self._write, b"!")
            except BlockingIOError:
                pass  # the pipe is full: the sleeper has a wake-up waiting already

    def close(self) -> None:
        if self._signals:
            signal.set_wakeup_fd(-1)
        with self._closing:
            self._closed = True
            os.close(self._read)
            os.close(self._write)
