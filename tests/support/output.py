"""A gateway process's output, read as it comes: tests wait for a log line while it runs."""

from __future__ import annotations

import subprocess
import threading

from tests.support.waiting import wait_for


class Output:
    """Collects the lines of `proc`'s stdout (stderr merged) on a thread of its own."""

    def __init__(self, proc: subprocess.Popen[str]):
        self.proc = proc
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def count(self, fragment: str) -> int:
        return sum(fragment in line for line in list(self.lines))

    def wait_for(self, fragment: str, timeout: float = 30.0) -> None:
        wait_for(
            lambda: self.count(fragment), timeout=timeout, what=f"{fragment!r} in the output", explain=lambda: self.text
        )

    def finish(self, timeout: float = 10.0) -> str:
        """Everything, once the process has exited."""
        self._thread.join(timeout)
        return self.text
