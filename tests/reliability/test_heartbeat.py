"""Issue 12, defect 2 (the heartbeat half): the heartbeat renews only jobs really in flight. A job
whose execution ended without recording an outcome is left to its lease, and recovered when it
expires (ARCHITECTURE "Claims, leases and recovery": a worker that stops heartbeating a job loses
it; at-least-once, never lost), instead of being kept `running` for as long as its worker lives."""

from __future__ import annotations

import pytest

from tests.support.output import Output
from tests.support.processes import ledger, start_workers, stop_gracefully
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.process]

# Why a trigger: it is the database itself refusing to end this one job, so recording the outcome
# (and any fallback that records a failure instead) fails for real and the execution ends with
# the job still `running` under the worker's id: what a crashed execution thread leaves behind.
SQLITE_REFUSE = """
CREATE TRIGGER refuse_finish BEFORE UPDATE OF status ON job_queue
FOR EACH ROW WHEN OLD.id = '{job}' AND NEW.status <> 'running'
BEGIN SELECT RAISE(ABORT, 'test: the database refuses to finish this job'); END
"""
PG_REFUSE_FUNCTION = """
CREATE FUNCTION refuse_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'test: the database refuses to finish this job'; END $$
"""
PG_REFUSE = """
CREATE TRIGGER refuse_finish BEFORE UPDATE OF status ON job_queue FOR EACH ROW
WHEN (OLD.id = '{job}' AND NEW.status <> 'running') EXECUTE FUNCTION refuse_finish()
"""


def refuse_to_finish(cfg, job_id: str) -> None:
    if cfg.database_url:
        ledger(cfg, "sql", PG_REFUSE_FUNCTION)
        ledger(cfg, "sql", PG_REFUSE.format(job=job_id))
    else:
        ledger(cfg, "sql", SQLITE_REFUSE.format(job=job_id))


def allow_finishing(cfg) -> None:
    ledger(cfg, "sql", "DROP TRIGGER refuse_finish" + (" ON job_queue" if cfg.database_url else ""))


def test_a_job_whose_execution_failed_is_recovered_not_kept_running_by_the_heartbeat(process_db, tmp_path):
    cfg = process_db
    cfg.service["lease_ttl"] = "5s"  # heartbeat every 1.25 s, recovery pass every 2.5 s
    cfg.write()
    marker = tmp_path / "m"
    marker.mkdir()
    spec = {"plugin": "stress", "command": "poll", "submitted_by": "cli", "max_attempts": 3}
    [job_id] = ledger(cfg, "enqueue", [{**spec, "payload": {"marker_dir": str(marker)}}])
    refuse_to_finish(cfg, job_id)
    daemon = start_workers(cfg, "--threads", "1", "--interval", "0.2")
    output = Output(daemon)
    try:
        # The plugin ran; neither its outcome nor a failure could be recorded, and execute raised.
        output.wait_for("its lease will expire")
        allow_finishing(cfg)
        # The lease (5 s) runs out because nothing renews it, the recovery pass re-queues the
        # job, and its second attempt succeeds. Renewed by the heartbeat, it would stay running.
        job = wait_for(
            lambda: next((j for j in ledger(cfg) if j["id"] == job_id and j["status"] == "succeeded"), None),
            timeout=30,
            what="the job to be recovered and succeed",
        )
    finally:
        stop_gracefully(daemon)
    assert job["attempt"] == 2
    reasons = [reason for _, reason in job["transitions"]]
    assert any("lease of worker" in r and "expired" in r for r in reasons), reasons
    assert len(list(marker.glob("*.start"))) == 2
    assert daemon.returncode == 0, output.finish()
