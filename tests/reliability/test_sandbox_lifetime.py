"""Nothing of a sandboxed plugin outlives its job or its daemon (issue 39): under `filesystem:
strict` the plugin has a PID namespace of its own, which the kernel empties when bubblewrap's
init ends, and bubblewrap dies with the thread that spawned it (--die-with-parent). A child that
left the plugin's session (setsid), which the host profile can only find and kill when the daemon
is a subreaper (`runworkers`), dies with the job here whoever runs it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledger.states import JobStatus
from tests.gateway.execution.test_sandbox_limits import intruder
from tests.reliability.test_hostile_plugins import alive
from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.processes import ledger, start_workers
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="bubblewrap's namespaces need root here (CI has it)")

INTRUDER = str(REPO / "tests" / "plugins" / "intruder" / "run.py")


def intruders() -> list[int]:
    """Host pids of this checkout's intruder plugin processes (a pid written inside the sandbox
    would be its namespace's)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and INTRUDER in Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace"):
                found.append(int(name))
        except OSError:
            pass
    return [pid for pid in found if alive(pid)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_under_strict_a_child_that_left_the_plugins_session_dies_with_the_job(
    config_dir: ConfigDir, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child.pid"
    job = intruder(
        config_dir,
        {"try": "linger", "pidfile": str(pidfile)},
        {"filesystem": "strict", "writable": [str(tmp_path)]},
    )
    assert job.status == JobStatus.SUCCEEDED
    assert pidfile.exists()  # it did start its child
    wait_for(lambda: not intruders(), timeout=5, what="no intruder process left", explain=lambda: str(intruders()))


@pytest.mark.postgres
@pytest.mark.process
def test_under_strict_nothing_of_the_plugin_outlives_a_kill_9_of_its_daemon(
    process_db: ConfigDir, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child.pid"
    process_db.plugins["intruder"] = {
        "retry": {"max_attempts": 1},
        "sandbox": {"filesystem": "strict", "writable": [str(tmp_path)]},
    }
    process_db.write()
    payload = {"try": "linger", "pidfile": str(pidfile), "hold": 120}
    spec = {"plugin": "intruder", "command": "poll", "submitted_by": "cli", "payload": payload}
    ledger(process_db, "enqueue", [spec])
    daemon = start_workers(process_db, "--threads", "1")
    try:
        wait_for(pidfile.exists, timeout=30, what="the plugin's child to start")
        assert len(intruders()) >= 2  # the plugin, holding its job, and its child in a session of its own
    finally:
        daemon.kill()  # SIGKILL: no drain, no cleanup
        daemon.wait()
    wait_for(lambda: not intruders(), timeout=5, what="no intruder process left", explain=lambda: str(intruders()))
