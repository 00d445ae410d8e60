"""A daemon loop that `system start` runs on a thread of its own process rather than as a child
process: the scheduler, whose loop wakes about once a second and would otherwise hold a whole
Django process (~58 MB) to do it (docs/performance.md, "Idle"). Huginn's threaded runner and
Celery's `worker -B` host their schedulers the same way. `runscheduler` stays for a scheduler run
apart (`system start --no-scheduler` on one node, `runscheduler` on another).

`Resident` wears the face of the `Popen` the supervisor watches (`poll`, `wait`, `send_signal`,
`kill`, `pid`), so a resident child is restarted, reloaded and drained like any other.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Protocol

from gateway.logs import logger

log = logger("supervisor")


class Loop(Protocol):
    def run(self) -> int: ...

    def stop(self) -> None: ...

    def reload_soon(self) -> None: ...


class Resident:
    def __init__(self, name: str, loop: Loop, on_end: Callable[[], None] | None = None):
        """`on_end` is called on the loop's thread once it has ended and `poll` says so."""
        self.name = name
        self.loop = loop
        self.on_end = on_end
        self.pid = os.getpid()
        self.returncode: int | None = None
        # Daemonic: a loop that does not stop when asked (a thread cannot be killed) must not keep
        # the supervisor's process alive after the supervisor has given up waiting for it.
        self._thread = threading.Thread(target=self._run, name=f"ductile-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        code = 1
        try:
            code = self.loop.run()
        except Exception:
            # As a child process's traceback would be: logged, then the supervisor restarts it.
            log.exception("%s failed", self.name)
        finally:
            self.returncode = code
            if self.on_end is not None:
                self.on_end()

    def poll(self) -> int | None:
        return self.returncode  # set as the loop ends, before `on_end`

    def wait(self, timeout: float | None = None) -> int:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise subprocess.TimeoutExpired(self.name, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            self.loop.reload_soon()
        else:
            self.loop.stop()

    def kill(self) -> None:
        self.loop.stop()
