"""What `system start` keeps resident (issue 16: the idle tree within 300 MB; docs/performance.md,
"Idle"), checked on the live process tree: no scheduler process (it runs on a thread of the
supervisor), a gunicorn master that never loaded the ledger (its start-up check ran in a child
that exited), and API workers that load the PostgreSQL driver only when the ledger is on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import children, descendants
from tests.support.live_api import live_api

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def mapped(pid: int, fragment: str) -> bool:
    """Whether a shared object whose path contains `fragment` is mapped into `pid`."""
    return any(fragment in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


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
