"""What `system start` keeps resident (issue 16: the idle tree within 300 MB; docs/performance.md,
"Idle"), checked on the live process tree: no scheduler process (it runs on a thread of the
supervisor), a gunicorn master that never loaded the ledger (its start-up check ran in a child
that exited), and API workers that load the PostgreSQL driver only when the ledger is on PostgreSQL."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.live_api import live_api
from tests.support.processes import children, descendants
from tests.support.waiting import wait_for


def mapped(pid: int, fragment: str) -> bool:
    """Whether a shared object whose path contains `fragment` is mapped into `pid`."""
    return any(fragment in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


@pytest.mark.postgres  # the driver each process maps differs by database; the wake-ups below do not
def test_the_idle_tree_keeps_only_what_each_process_uses(process_db):
    cfg = process_db
    with live_api(cfg, [{"name": "t", "token": "tok-footprint", "scopes": ["*"]}], workers=True) as live:
        tree = descendants(live.proc.pid)
        commands = {pid: tree[pid] for pid in children(live.proc.pid)}
        assert not [c for c in commands.values() if "runscheduler" in c], commands  # a thread, not a process
        assert [c for c in commands.values() if "runworkers" in c], commands
        (master,) = [pid for pid, c in commands.items() if "gunicorn" in c]
        workers = children(master)
        assert len(workers) == 2, workers
        assert live.api.call("GET", "/healthz", token=None)[0] == 200
        # The master checked the ledger through a child: it holds neither sqlite3 nor libpq.
        assert not mapped(master, "sqlite3") and not mapped(master, "libpq"), "the gunicorn master loaded the ledger"
        on_postgres = cfg.database_url is not None
        for worker in workers:
            assert mapped(worker, "libpq") == on_postgres, f"worker {worker} on postgres={on_postgres}"


def wake_ups(pid: int) -> int:
    """How many times `pid`'s main thread has gone to sleep and been woken so far."""
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    return sum(int(line.split()[1]) for line in status.splitlines() if "voluntary_ctxt_switches" in line)


def test_an_idle_api_wakes_seldom_and_still_stops_at_once(process_db):
    """gunicorn's master and workers wake every second by default: half the wake-ups of an idle
    gateway (docs/performance-history.md, item 36). Ours wait five seconds unless something happens, and
    what must be prompt still is: a request is answered, a killed worker is replaced, and SIGTERM
    stops the tree."""
    with live_api(process_db, [{"name": "t", "token": "tok-quiet", "scopes": ["*"]}]) as live:
        tree = descendants(live.proc.pid)
        (master,) = [pid for pid in children(live.proc.pid) if "gunicorn" in tree[pid]]
        workers = children(master)
        time.sleep(1.0)  # past the start-up
        before = {pid: wake_ups(pid) for pid in (master, *workers)}
        time.sleep(6.0)
        woken = {pid: wake_ups(pid) - count for pid, count in before.items()}
        # At most two timed wake-ups each in 6 s (one a second would be six or more).
        assert all(n <= 3 for n in woken.values()), woken

        started = time.monotonic()
        assert live.api.call("GET", "/healthz", token=None, timeout=5)[0] == 200
        assert time.monotonic() - started < 1.0

        os.kill(workers[0], signal.SIGKILL)
        wait_for(lambda: len(set(children(master)) - {workers[0]}) == 2, timeout=2.0, what="a new worker")

        started = time.monotonic()
        live.proc.send_signal(signal.SIGTERM)
        live.proc.wait(timeout=10)
        assert time.monotonic() - started < 3.0
        assert live.proc.returncode == 0
