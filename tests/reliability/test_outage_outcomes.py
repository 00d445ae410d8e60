"""A database outage while a plugin runs (issue 33, item 6): the plugin finishes during the
outage, and its worker cannot record the outcome. While its lease lasts, the worker keeps the
outcome and records it once the database is back, so the plugin runs once; where it dropped it at
once, the job waited out its lease and ran again. Past the lease another worker may have taken the
job: the outcome is dropped then, and the job's next attempt runs it. The outages are real: the
PostgreSQL server stopped, or the SQLite ledger's files made immutable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.outages import can_go_down, database_down
from tests.support.output import Output
from tests.support.processes import ductile_json, ledger, start_workers, stop_gracefully
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.process]


def runs(marker: Path) -> int:
    return len(list(marker.glob("*.start")))


def run_through_an_outage(
    cfg: ConfigDir, marker: Path, *, lease: str, plugin: float, outage: float
) -> tuple[dict, str]:
    """One stress job whose run of `plugin` seconds is met by an outage of `outage` seconds
    starting as it runs; the job once it ended, and what the worker said."""
    can_go_down(cfg)
    cfg.service["lease_ttl"] = lease
    cfg.write()
    payload = {"marker_dir": str(marker), "sleep": plugin}
    spec = {"plugin": "stress", "command": "poll", "submitted_by": "cli", "max_attempts": 3, "payload": payload}
    [job_id] = ledger(cfg, "enqueue", [spec])
    daemon = start_workers(cfg, "--threads", "1", "--interval", "0.2")
    output = Output(daemon)
    try:
        wait_for(lambda: runs(marker) == 1, timeout=30, what="the plugin to start", explain=lambda: output.text)
        with database_down(cfg, outage):
            output.wait_for("recording the outcome", timeout=30)  # the plugin finished meanwhile
        job = wait_for(
            lambda: next((j for j in ledger(cfg) if j["id"] == job_id and j["status"] == "succeeded"), None),
            timeout=30,
            what="the job to succeed",
            explain=lambda: output.text,
        )
    finally:
        stop_gracefully(daemon)
    return job, output.finish()


def test_an_outcome_finished_during_an_outage_is_recorded_once_the_database_is_back(outage_db, tmp_path):
    job, text = run_through_an_outage(outage_db, tmp_path, lease="12s", plugin=2.0, outage=6.0)
    assert runs(tmp_path) == 1, text
    assert job["attempt"] == 1 and "result discarded" not in text, text
    code, inspected = ductile_json(outage_db, "job", "inspect", job["id"])
    assert code == 0, inspected
    # One attempt, one run on the stopwatch, and the plugin's own answer as the result.
    assert [a["status"] for a in inspected["attempts"]] == ["succeeded"], inspected["attempts"]
    assert inspected["attempts"][0]["result"]["result"] == "ok after 2.0s", inspected["attempts"]
    assert len(inspected["stopwatch"]) == 1, inspected["stopwatch"]
    if outage_db.database_url:  # the workers' LISTEN connection said it once, not at every reconnect
        assert text.count("wake-ups failed") == 1 and "wake-ups works again" in text, text


def test_an_outcome_the_database_refused_past_the_lease_is_dropped_and_the_job_runs_again(outage_db, tmp_path):
    job, text = run_through_an_outage(outage_db, tmp_path, lease="5s", plugin=1.0, outage=10.0)
    assert "result discarded: the database refused it for as long as this worker's lease lasted" in text, text
    assert runs(tmp_path) == 2 and job["attempt"] == 2, (job, text)
    assert any("lease of worker" in reason for _, reason in job["transitions"]), job
