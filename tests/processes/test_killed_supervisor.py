"""A `system start` killed with SIGKILL (what the OOM killer sends) takes its tree with it, and the
next start comes up on the same port (issue 33, item 24; gateway/daemon/tree.py). Before: gunicorn,
`runworkers` and the housekeeping cluster ran on as orphans, the API serving the old config, and the
next start looped on "Address already in use"."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.support.live_api import Api
from tests.support.network import free_port
from tests.support.output import Output
from tests.support.processes import descendants, ductile, start_system, stop_gracefully
from tests.support.waiting import wait_for


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def with_cluster(tree: dict[int, str]) -> dict[int, str] | None:
    return tree if any("qcluster" in command for command in tree.values()) else None


def test_a_killed_supervisor_takes_its_tree_with_it_and_the_next_start_comes_up(process_db):
    cfg = process_db
    port = free_port()
    cfg.extra["api"] = {"listen": f"127.0.0.1:{port}"}
    cfg.write()
    first = start_system(cfg, "--housekeeping-linger", "300")
    try:
        output = Output(first)
        api = Api(port)
        wait_for(api.up, timeout=60, what="the API", explain=lambda: output.text)
        tree = wait_for(
            lambda: with_cluster(descendants(first.pid)),
            timeout=60,
            what="the housekeeping cluster to run beside the API and the workers",
            explain=lambda: output.text,
        )
        assert any("gunicorn" in c for c in tree.values()) and any("runworkers" in c for c in tree.values())
        # A second start beside a live one is refused: it would take the PID lock and the port.
        beside = ductile(cfg, "system", "start")
        assert beside.returncode == 1 and "already runs" in beside.stderr, beside.stderr

        first.send_signal(signal.SIGKILL)
        first.wait()
        wait_for(lambda: not any(running(pid) for pid in tree), timeout=30, what="every process of the tree to end")
    finally:
        # A failure before the SIGKILL above must not leave a supervisor tree running for hours.
        if first.poll() is None:
            leftovers = descendants(first.pid)
            first.kill()
            first.wait()
            for pid in leftovers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    second = start_system(cfg, "--no-housekeeping")
    try:
        wait_for(api.up, timeout=60, what="the next start's API", explain=lambda: Output(second).text)
    finally:
        stop_gracefully(second)


def test_a_start_that_cannot_write_the_runtime_snapshot_says_so_and_starts_nothing(process_db):
    cfg = process_db
    cfg.write()
    (cfg.db_path.parent / "ductile.runtime").mkdir(parents=True)  # in the snapshot's way
    start = ductile(cfg, "system", "start", "--no-housekeeping")
    assert start.returncode == 1
    assert "cannot write the runtime snapshot" in start.stderr, start.stderr
    assert not (cfg.db_path.parent / "ductile.pid").exists()
