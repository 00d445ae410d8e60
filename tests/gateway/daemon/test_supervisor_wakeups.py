"""`system start`'s supervisor sleeps between passes until something is due (up to MAX_PASS), and
is woken at once by a signal, a child's exit (SIGCHLD) included: an idle tree costs few wake-ups,
and a dead child is still seen, and restarted, without waiting out the sleep."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from gateway.daemon import supervisor
from gateway.daemon.supervisor import MAX_PASS, Child, Supervisor

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)


@pytest.fixture
def own_signals():
    """The supervisor takes over the process's signals; the test runner gets its own back."""
    saved = {signum: signal.getsignal(signum) for signum in HANDLED}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_child_s_exit_wakes_the_sleeping_supervisor(tmp_path: Path, monkeypatch, own_signals) -> None:
    monkeypatch.setattr(supervisor, "ensure_schema", lambda: None)
    child = Child("short", [sys.executable, "-c", "import time; time.sleep(0.5)"], {}, reloads=False)
    seen: list[float] = []
    exited = child.exited

    def record(code: int, now: float) -> None:
        seen.append(time.monotonic())
        exited(code, now)

    monkeypatch.setattr(child, "exited", record)

    def stop_once_seen() -> None:
        deadline = time.monotonic() + 3 * MAX_PASS
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's own handler: it drains and returns

    threading.Thread(target=stop_once_seen, daemon=True).start()
    started = time.monotonic()
    Supervisor([child], tmp_path / "ductile.pid").run()
    assert seen, "the supervisor never saw its child exit"
    # The child lived 0.5 s (plus its interpreter's start); the next timed pass was MAX_PASS away.
    assert seen[0] - started < MAX_PASS / 2, seen[0] - started
