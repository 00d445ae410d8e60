"""A real `runworkers` whose PostgreSQL connections are cut by the server mid-run: it reconnects and
runs the next job (issue "One front door for every job", defect 2)."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.processes import ledger, start_workers, stop_gracefully
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres


def test_the_daemon_outlives_its_connections_being_cut(process_db):
    if not process_db.database_url:
        pytest.skip("PostgreSQL: its server can end a client's connections")
    process_db.write()
    daemon = start_workers(process_db, "--threads", "1")
    try:
        first = ledger(process_db, "enqueue", [{"plugin": "echo", "command": "poll"}])[0]
        wait_for(lambda: _status(process_db, first) == "succeeded", timeout=60, what="the first job")
        with psycopg.connect(process_db.database_url, autocommit=True) as admin:
            cut = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        assert cut, "the daemon had no connection to cut"
        second = ledger(process_db, "enqueue", [{"plugin": "echo", "command": "poll"}])[0]
        wait_for(lambda: _status(process_db, second) == "succeeded", timeout=60, what="a job after the cut")
        assert daemon.poll() is None
    finally:
        stop_gracefully(daemon)


def _status(cfg, job_id: str) -> str | None:
    return next((j["status"] for j in ledger(cfg) if j["id"] == job_id), None)
