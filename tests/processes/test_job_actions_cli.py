"""An operator's `job cancel ID` and `job retry ID` (the twins of the audit console's Cancel and
Retry now buttons), with `--dry-run` and `--json`, against real plugin processes and `runworkers`."""

from __future__ import annotations

import pytest

from tests.support.processes import ductile, ductile_json, ledger, start_workers

pytestmark = pytest.mark.postgres


def enqueue(cfg, payload, max_attempts=1):
    spec = {"plugin": "stress", "command": "poll", "submitted_by": "api", "payload": payload}
    return ledger(cfg, "enqueue", [{**spec, "max_attempts": max_attempts}])[0]


def job(cfg, job_id):
    return next(j for j in ledger(cfg) if j["id"] == job_id)


def run_once(cfg):
    workers = start_workers(cfg, "--once")
    output = workers.communicate(timeout=120)[0]
    assert workers.returncode == 0, output


def test_cancel_a_queued_job_so_it_never_runs(process_db, tmp_path):
    cfg = process_db
    cfg.write()
    job_id = enqueue(cfg, {"mode": "ok"})
    code, preview = ductile_json(cfg, "job", "cancel", job_id, "--dry-run")
    assert code == 0 and (preview["from"], preview["to"], preview["dry_run"]) == ("queued", "dead", True)
    assert job(cfg, job_id)["status"] == "queued"
    code, done = ductile_json(cfg, "job", "cancel", job_id)
    assert code == 0 and done["to"] == "dead"
    row = job(cfg, job_id)
    assert row["status"] == "dead" and row["last_error"] == "cancelled by cli"
    assert row["transitions"][-1] == ["dead", "cancelled by cli"]
    run_once(cfg)
    assert job(cfg, job_id)["status"] == "dead" and len(job(cfg, job_id)["transitions"]) == 2  # never claimed
    # Only a queued job can be cancelled: exit 2 and why; nothing changes.
    proc = ductile(cfg, "job", "cancel", job_id)
    assert proc.returncode == 2 and "is dead; only a queued job can be cancelled" in proc.stderr
    assert ductile(cfg, "job", "cancel", "no-such-job").returncode == 1


def test_retry_gives_a_dead_job_one_more_attempt_now(process_db, tmp_path):
    cfg = process_db
    cfg.write()
    job_id = enqueue(cfg, {"mode": "fail_until", "succeed_on": 2, "marker_dir": str(tmp_path)})
    run_once(cfg)
    assert job(cfg, job_id)["status"] == "dead"  # one attempt allowed, and it failed
    code, preview = ductile_json(cfg, "job", "retry", job_id, "--dry-run")
    assert code == 0 and (preview["from"], preview["to"]) == ("dead", "queued")
    assert job(cfg, job_id)["status"] == "dead"
    code, done = ductile_json(cfg, "job", "retry", job_id)
    assert code == 0 and (done["attempt"], done["max_attempts"]) == (2, 2)
    row = job(cfg, job_id)
    assert row["status"] == "queued" and row["transitions"][-1] == ["queued", "retried by cli: attempt 2/2"]
    run_once(cfg)
    assert job(cfg, job_id)["status"] == "succeeded"  # the second attempt succeeds
    proc = ductile(cfg, "job", "retry", job_id, "--dry-run")
    assert proc.returncode == 2 and "only a failed, timed_out or dead job can be retried" in proc.stderr
