"""Under a real `system start`, the scheduler runs on a thread of the supervisor, not as a process
of its own (gateway.daemon.resident; docs/performance.md, "Idle"): it fires its schedules, SIGHUP
reloads it with the rest of the tree, and SIGTERM drains it."""

from __future__ import annotations

import signal

import pytest

from tests.support.output import Output
from tests.support.processes import descendants, ledger, start_system
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres


def scheduled(cfg, plugin: str) -> list[dict]:
    return [job for job in ledger(cfg) if job["plugin"] == plugin]


def fired(cfg, plugin: str, output: Output) -> list[dict]:
    """The jobs the schedule of `plugin` has queued, once there is one; on a timeout the
    supervisor's output says why."""
    return wait_for(
        lambda: scheduled(cfg, plugin),
        timeout=60,
        interval=0.5,
        what=f"the schedule of {plugin} to fire",
        explain=lambda: output.text,
    )


def test_the_scheduler_fires_reloads_and_drains_on_a_thread_of_the_supervisor(process_db):
    cfg = process_db
    cfg.extra["api"] = {"enabled": False}
    cfg.plugins["echo"] = {"config": {"message": "tick"}, "schedules": [{"every": "1s", "command": "poll"}]}
    cfg.write()
    proc = start_system(cfg, "--no-workers", "--no-housekeeping")
    output = Output(proc)
    try:
        fired(cfg, "echo", output)
        assert descendants(proc.pid) == {}, "no process besides the supervisor"
        # A schedule added to the config fires after SIGHUP, which the resident scheduler takes.
        cfg.plugins["probe"] = {"config": {}, "schedules": [{"every": "1s", "command": "poll"}]}
        cfg.write()
        proc.send_signal(signal.SIGHUP)
        fired(cfg, "probe", output)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, output.text
        text = output.finish()
        assert "started runscheduler (on a thread of the supervisor" in text, text
        assert "runscheduler stopped" in text, text
        assert "exited" not in text and "failed" not in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
