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
from gateway.runtime import RuntimeHolder
from tests.support.config_dirs import ConfigDir

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)


@pytest.fixture
def own_signals():
    """The supervisor takes over the process's signals; the test runner gets its own back."""
    saved = {signum: signal.getsignal(signum) for signum in HANDLED}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def holder(tmp_path: Path) -> RuntimeHolder:
    """The supervisor's runtime: a config whose state directory (PID lock, snapshot) is `tmp_path`'s."""
    runtime = RuntimeHolder()
    runtime.load(ConfigDir(tmp_path / "config").write())
    return runtime


def first_exit(child: Child, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[float, int]:
    """Run a supervisor of `child` until it sees the child end (then SIGTERM it, which it drains):
    the seconds from the supervisor's start to that moment, and the exit code it saw."""
    monkeypatch.setattr(supervisor, "ensure_schema", lambda: None)
    seen: list[tuple[float, int]] = []
    exited = child.exited

    def record(code: int, now: float) -> None:
        seen.append((time.monotonic(), code))
        exited(code, now)

    monkeypatch.setattr(child, "exited", record)

    def stop_once_seen() -> None:
        deadline = time.monotonic() + 3 * MAX_PASS
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's own handler: it drains and returns

    threading.Thread(target=stop_once_seen, daemon=True).start()
    started = time.monotonic()
    Supervisor([child], holder(tmp_path)).run()
    assert seen, f"the supervisor never saw {child.name} end"
    return seen[0][0] - started, seen[0][1]


@pytest.mark.django_db(transaction=True)  # the supervisor keeps its node row (gateway.daemon.presence)
def test_a_child_s_exit_wakes_the_sleeping_supervisor(tmp_path: Path, monkeypatch, own_signals) -> None:
    child = Child("short", [sys.executable, "-c", "import time; time.sleep(0.5)"], {}, reloads=False)
    after, code = first_exit(child, tmp_path, monkeypatch)
    # The child lived 0.5 s (plus its interpreter's start); the next timed pass was MAX_PASS away.
    assert after < 3.0 and code == 0, after


class EndsSoon:
    """A resident loop (the scheduler's place) that ends by itself after half a second."""

    def run(self) -> int:
        time.sleep(0.5)
        return 3

    def stop(self) -> None:
        pass

    def reload_soon(self) -> None:
        pass


@pytest.mark.django_db(transaction=True)
def test_a_resident_loop_s_end_wakes_the_sleeping_supervisor(tmp_path: Path, monkeypatch, own_signals) -> None:
    # No signal announces a thread's end: the loop itself wakes the supervisor, which restarts it.
    after, code = first_exit(Child("runscheduler", [], {}, resident=EndsSoon), tmp_path, monkeypatch)
    assert after < 3.0 and code == 3, after


def test_an_idle_supervisor_asks_a_parked_child_s_question_seldom(tmp_path: Path) -> None:
    # A stopped on-demand child without work: asked every idle_every (30 s), not every 5 s; the
    # supervisor then sleeps until that question, with nothing else due.
    demand = supervisor.Demand(lambda running: False, every=5.0, linger=30.0, idle_every=30.0)
    parked = Child("housekeeping", [sys.executable, "-c", "pass"], {}, reloads=False, demand=demand)
    parked.ask(time.monotonic())
    assert not parked.needed
    boss = Supervisor([parked], holder(tmp_path))
    assert 25.0 < boss._next_pass() <= 30.0
    # Wanted, or running, it is asked every 5 s again.
    parked.needed = True
    assert boss._next_pass() <= 5.0
