"""Under a real `system start`, the scheduler runs on a thread of the supervisor, not as a process
of its own (gateway.daemon.resident; docs/performance.md, "Idle"): it fires its schedules, SIGHUP
reloads it with the rest of the tree, and SIGTERM drains it."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support import REPO, cli_env, ledger, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def descendants(root: int) -> list[bytes]:
    """The command lines of `root`'s descendant processes."""
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            pending.append(int(child))
            try:
                found.append(Path(f"/proc/{child}/cmdline").read_bytes())
            except OSError:
                pass
    return found


def scheduled(cfg, plugin: str) -> list[dict]:
    return [job for job in ledger(cfg) if job["plugin"] == plugin]


def test_the_scheduler_fires_reloads_and_drains_on_a_thread_of_the_supervisor(process_db):
    cfg = process_db
    cfg.extra["api"] = {"enabled": False}
    cfg.plugins["echo"] = {"config": {"message": "tick"}, "schedules": [{"every": "1s", "command": "poll"}]}
    cfg.write()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "manage.py"),
            "system",
            "start",
            "--no-workers",
            "--no-housekeeping",
            "--config-dir",
            str(cfg.path),
        ],
        env=cli_env(cfg),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_for(lambda: scheduled(cfg, "echo"), timeout=60, interval=0.5, what="the schedule to fire")
        assert descendants(proc.pid) == [], "no process besides the supervisor: " + repr(descendants(proc.pid))
        # A schedule added to the config fires after SIGHUP, which the resident scheduler takes.
        cfg.plugins["probe"] = {"config": {}, "schedules": [{"every": "1s", "command": "poll"}]}
        cfg.write()
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: scheduled(cfg, "probe"), timeout=60, interval=0.5, what="the reloaded schedule to fire")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "".join(lines)
        reader.join(timeout=10)
        output = "".join(lines)
        assert "started runscheduler (on a thread of the supervisor" in output, output
        assert "runscheduler stopped" in output, output
        assert "exited" not in output and "failed" not in output, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
