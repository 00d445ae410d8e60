"""`system selfcheck` as an operator runs it before a deploy: six invariants, exit 0 healthy and
1 when one failed; a corrupted database file, a database missing a migration, stale terminal
queue rows and a running gateway each caught and named."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile, ductile_json, ledger, run_sql

pytestmark = pytest.mark.process

CHECKS = ["config_discovery", "config_load", "pid_lock", "db_integrity", "db_schema", "queue_terminal_freshness"]
SKIPPED_RUNNING = "skipped: active gateway holds PID lock — quiesce before selfcheck"


def selfcheck(config: ConfigDir) -> tuple[int, dict[str, dict]]:
    code, data = ductile_json(config, "system", "selfcheck")
    assert [c["name"] for c in data["checks"]] == CHECKS
    # The shape GET /system/selfcheck answers (a deploy gate reads either), plus the CLI's `healthy`.
    assert set(data) == {"ok", "healthy", "captured_at", "checks"} and data["captured_at"].endswith("Z")
    assert data["ok"] is data["healthy"] is (code == 0)
    return code, {c["name"]: c for c in data["checks"]}


def migrated(config: ConfigDir, jobs: int = 1) -> None:
    """A database as a started gateway leaves it: migrated, with `jobs` jobs in it."""
    config.write()
    ledger(config, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}] * jobs)


@pytest.mark.postgres
def test_a_healthy_stopped_instance_passes_every_check(process_db):
    migrated(process_db)
    code, checks = selfcheck(process_db)
    assert code == 0
    assert {name: c["status"] for name, c in checks.items()} == {
        **dict.fromkeys(CHECKS, "ok"),
        # PostgreSQL checks its own pages; SQLite's PRAGMA does not apply there.
        "db_integrity": "skipped" if process_db.database_url else "ok",
    }
    assert checks["pid_lock"]["path"] == str(process_db.db_path.parent / "ductile.pid")
    text = ductile(process_db, "system", "selfcheck")
    assert text.returncode == 0 and text.stdout.startswith("selfcheck: PASS")


def test_a_corrupted_database_file_fails_db_integrity(config_dir):
    migrated(config_dir, jobs=300)  # enough rows for the tables to span many pages
    path = config_dir.db_path
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = db.execute("PRAGMA page_size").fetchone()[0]
    size = path.stat().st_size
    assert size // page > 20
    with open(path, "r+b") as handle:
        for number in range(size // page // 2, size // page // 2 + 4):
            handle.seek(number * page)
            handle.write(bytes(range(256)) * (page // 256))
    code, checks = selfcheck(config_dir)
    assert code == 1
    assert checks["db_integrity"]["status"] == "fail"
    assert "integrity_check" in checks["db_integrity"]["detail"]
    assert checks["config_load"]["status"] == "ok" and checks["pid_lock"]["status"] == "ok"


@pytest.mark.postgres
def test_a_database_missing_a_migration_fails_db_schema_naming_it(process_db):
    migrated(process_db)
    back = ductile(process_db, "migrate", "ledger", "0004")
    assert back.returncode == 0, back.stderr
    code, checks = selfcheck(process_db)
    assert code == 1
    detail = checks["db_schema"]["detail"]
    assert "ledger.0005_retention_indexes" in detail
    # An index a later migration (0007) adds, named with its table.
    assert "index job_queue_error_idx on job_queue" in detail
    assert checks["queue_terminal_freshness"]["status"] == "skipped"


@pytest.mark.postgres
def test_terminal_queue_rows_past_retention_fail_freshness(process_db):
    migrated(process_db, jobs=2)
    job_id = ledger(process_db)[0]["id"]
    sql = f"UPDATE job_queue SET status = 'dead', completed_at = '2000-01-01 00:00:00+00:00' WHERE id = '{job_id}'"
    run_sql(process_db, sql)
    code, checks = selfcheck(process_db)
    assert code == 1
    assert checks["queue_terminal_freshness"]["status"] == "fail"
    assert checks["queue_terminal_freshness"]["detail"].startswith("1 terminal job_queue rows older than 1d")


def test_a_running_gateway_fails_pid_lock_and_skips_the_database_checks(config_dir):
    migrated(config_dir)
    pid_file = config_dir.db_path.parent / "ductile.pid"
    # A live process standing in for a running gateway: its sleep is not synchronisation.
    gateway = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid_file.write_text(f"{gateway.pid}\n")
        code, checks = selfcheck(config_dir)
        assert code == 1
        assert checks["pid_lock"]["status"] == "fail" and str(gateway.pid) in checks["pid_lock"]["detail"]
        for name in ("db_integrity", "db_schema", "queue_terminal_freshness"):
            assert (checks[name]["status"], checks[name]["detail"]) == ("skipped", SKIPPED_RUNNING)
    finally:
        gateway.kill()
        gateway.wait()
    # Its process gone, the file is stale: not a lock.
    code, checks = selfcheck(config_dir)
    assert code == 0 and checks["pid_lock"]["detail"].startswith("stale PID file")


def test_no_config_and_a_broken_config_fail_their_checks_and_create_nothing(config_dir, tmp_path):
    missing = ConfigDir(tmp_path / "nowhere")
    os.rmdir(missing.path)
    code, checks = selfcheck(missing)
    assert code == 1 and checks["config_discovery"]["status"] == "fail"
    assert all(checks[name]["status"] == "skipped" for name in CHECKS[1:])

    config_dir.service["max_workers"] = "many"
    config_dir.write()
    code, checks = selfcheck(config_dir)
    assert code == 1 and checks["config_load"]["status"] == "fail"
    assert "service.max_workers" in checks["config_load"]["detail"]

    del config_dir.service["max_workers"]
    config_dir.write()
    code, checks = selfcheck(config_dir)
    assert code == 1 and checks["db_integrity"]["detail"].startswith("database file")
    assert not config_dir.db_path.exists()  # read-only: the missing database was not created
