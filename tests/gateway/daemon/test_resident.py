"""A resident child of `system start` (the scheduler, on a thread of the supervisor): supervised as
a child process is. A loop that fails is restarted with the same growing delay, SIGHUP reloads it,
SIGTERM drains it and its exit code is the loop's."""

from __future__ import annotations

import signal
import subprocess
import threading

import pytest

from gateway.daemon.resident import Resident
from gateway.daemon.supervisor import Child


class FakeLoop:
    """A loop with the scheduler's controls; `fail` makes its run raise, as a bug would."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.stopping = threading.Event()
        self.reloads = 0
        self.reloaded = threading.Event()

    def run(self) -> int:
        if self.fail:
            raise RuntimeError("a bug in the loop")
        self.stopping.wait(30)
        return 0 if self.stopping.is_set() else 3

    def stop(self) -> None:
        self.stopping.set()

    def reload_soon(self) -> None:
        self.reloads += 1
        self.reloaded.set()


def test_sighup_reloads_a_resident_loop_and_sigterm_drains_it_with_its_exit_code():
    loop = FakeLoop()
    child = Child("runscheduler", [], {}, resident=lambda: loop)
    child.start()
    assert isinstance(child.process, Resident)
    assert child.process.poll() is None  # running
    child.signal(signal.SIGHUP)
    assert loop.reloaded.wait(5) and loop.reloads == 1
    assert child.process.poll() is None, "a reload must not end the loop"
    child.signal(signal.SIGTERM)
    assert child.process.wait(timeout=5) == 0
    assert child.process.poll() == 0


def test_a_resident_loop_that_fails_is_restarted_with_a_fresh_loop():
    made: list[FakeLoop] = []

    def fresh() -> FakeLoop:
        made.append(FakeLoop(fail=not made))  # the first one fails
        return made[-1]

    child = Child("runscheduler", [], {}, resident=fresh)
    child.start()
    assert child.process is not None
    code = child.process.wait(timeout=5)
    assert code == 1
    child.exited(code, now=child.started_at + 1)
    assert child.process is None and child.failures == 1
    assert child.restart_at == pytest.approx(child.started_at + 2)  # 1 s delay, as for a process
    child.start()
    assert len(made) == 2 and child.process.poll() is None  # a new loop, not the failed one
    child.signal(signal.SIGTERM)
    assert child.process.wait(timeout=5) == 0


def test_waiting_on_a_loop_that_will_not_stop_times_out_rather_than_hanging():
    class Stubborn(FakeLoop):
        def stop(self) -> None:
            pass  # ignores the request

    loop = Stubborn()
    resident = Resident("stubborn", loop)
    resident.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        resident.wait(timeout=0.2)
    assert resident.poll() is None
    loop.stopping.set()  # let the thread end
    assert resident.wait(timeout=5) == 0
