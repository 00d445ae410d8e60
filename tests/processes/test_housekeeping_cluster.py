"""The housekeeping cluster (django-q2) under a real `system start`: pruning at start and a
scheduled backup run when due, the cluster never dying; between the two it is stopped, since it
has nothing to do, and started again when the backup falls due."""

from __future__ import annotations

import signal
import tarfile

from gateway.operations.housekeeping import BACKUP_SCHEDULE
from tests.support.output import Output
from tests.support.processes import descendants, ledger, run_sql, start_system
from tests.support.waiting import wait_for

# Not `postgres` (45 s of CI's budget): what runs on the database here is django-q2's ORM broker
# and the prune and backup code, which tests/gateway/operations/test_housekeeping.py runs on both.


def qclusters(root: int) -> list[int]:
    """The `qcluster` processes among `root`'s descendants."""
    return [pid for pid, command in descendants(root).items() if "qcluster" in command]


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
    proc = start_system(cfg, "--no-workers", "--no-scheduler", "--housekeeping-linger", "2")
    output = Output(proc)
    try:
        # The prune schedule is new, so it is due at once and queued before the cluster's first pass.
        wait_for(lambda: len(ledger(cfg)) == 1, timeout=60, interval=0.5, what="the cluster to prune old jobs")
        assert ledger(cfg)[0]["status"] == "queued"
        assert qclusters(proc.pid), "the cluster runs while there is housekeeping"
        # Then nothing is due until tomorrow: after its linger the cluster is stopped, not restarted.
        wait_for(lambda: not qclusters(proc.pid), timeout=60, interval=0.5, what="the idle cluster to stop")
        # The supervisor reaps and logs the stop on its next pass, a moment after the process is gone.
        output.wait_for("housekeeping stopped while idle")
        # The backup is next due tomorrow; bring it forward. No signal: the supervisor notices it is
        # due, queues it and starts the cluster, which runs it.
        run_sql(
            cfg, f"UPDATE django_q_schedule SET next_run = '2000-01-01 00:00:00+00:00' WHERE name = '{BACKUP_SCHEDULE}'"
        )
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
                    "uid.txt",
                    "db/ductile.sqlite",
                    "db/ledger.jsonl",
                }
            )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, output.text
        text = output.finish()
        assert text.count("started housekeeping") == 2, text  # at start, then for the backup
        assert "exited" not in text, text  # the cluster never died
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
