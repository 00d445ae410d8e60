"""The housekeeping cluster (django-q2) under a real `system start`: pruning at start and a
scheduled backup run when due, the cluster never dying."""

from __future__ import annotations

import signal
import subprocess
import sys
import tarfile

import pytest

from gateway.operations.housekeeping import BACKUP_SCHEDULE
from tests.support import REPO, cli_env, ledger, run_sql, wait_for


@pytest.mark.postgres
@pytest.mark.slow
def test_the_cluster_under_system_start_prunes_at_start_and_backs_up_when_due(process_db, tmp_path):
    cfg = process_db
    backups = tmp_path / "backups"
    backups.mkdir()
    (backups / "ductile-20000101T000000Z.tar.gz").write_text("an old archive")
    cfg.extra["api"] = {"enabled": False}
    cfg.service["backup"] = {"schedule": "daily", "directory": str(backups), "keep": 1, "scope": "db"}
    cfg.write()
    old = ledger(cfg, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"} for _ in range(3)])[:2]
    # Two of them finished long ago: past the 24h job_queue_retention.
    run_sql(
        cfg,
        "UPDATE job_queue SET status = 'succeeded', completed_at = '2000-01-01 00:00:00+00:00' "
        f"WHERE id IN ('{old[0]}', '{old[1]}')",
    )
    start = ["system", "start", "--no-workers", "--no-scheduler", "--config-dir", str(cfg.path)]
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), *start],
        env=cli_env(cfg),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # The prune schedule is new, so it is due at once and queued before the cluster's first pass.
        wait_for(lambda: len(ledger(cfg)) == 1, timeout=60, interval=0.5, what="the cluster to prune old jobs")
        assert ledger(cfg)[0]["status"] == "queued"
        # The backup is next due tomorrow; bring it forward, then SIGHUP: the supervisor refreshes
        # the schedules and queues what is due, and the (not restarted) cluster runs it.
        run_sql(
            cfg, f"UPDATE django_q_schedule SET next_run = '2000-01-01 00:00:00+00:00' WHERE name = '{BACKUP_SCHEDULE}'"
        )
        proc.send_signal(signal.SIGHUP)
        archives = wait_for(
            lambda: [p for p in backups.glob("ductile-2*.tar.gz") if p.name != "ductile-20000101T000000Z.tar.gz"],
            timeout=60,
            interval=0.5,
            what="a scheduled backup",
        )
        assert [p.name for p in backups.iterdir()] == [archives[0].name]  # keep: 1 removed the old one
        with tarfile.open(archives[0]) as tar:
            assert (
                {"BACKUP_MANIFEST.txt"}
                < set(tar.getnames())
                <= {
                    "BACKUP_MANIFEST.txt",
                    "db/ductile.sqlite",
                    "db/ledger.jsonl",
                }
            )
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, output
        assert "housekeeping" in output and "exited" not in output  # the cluster never died
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
