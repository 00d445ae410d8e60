"""The `runworkers` daemon as a real process: crash recovery, sharing one database, draining,
reload. Spec 000 §3.4 (never lose a job), §11.2, §11.3; ARCHITECTURE "Claims, leases and recovery"."""

from __future__ import annotations

import collections
import signal
import time
from pathlib import Path

import pytest
import yaml

from gateway.storage.checkpoints import CHECKPOINT_PAGES
from ledger.writes.autocheckpoint import BESIDE_CHECKPOINTER_PAGES
from tests.support.output import Output
from tests.support.processes import ductile, ledger, start_workers, stop_gracefully
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres


def stress_jobs(n: int, marker: Path, **payload) -> list[dict]:
    return [
        {
            "plugin": "stress",
            "command": "poll",
            "submitted_by": "cli",
            "max_attempts": 3,
            "payload": {"marker_dir": str(marker), **payload},
        }
        for _ in range(n)
    ]


def stop(proc, sig=signal.SIGTERM, timeout=30):
    if proc.poll() is None:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=timeout)
    return out


def starts_per_job(marker: Path) -> collections.Counter:
    return collections.Counter(p.name.split(".")[0] for p in marker.glob("*.start"))


@pytest.fixture
def cfg(process_db):
    process_db.plugins["stress"] = {"config": {}, "parallelism": 2, "timeout": "30s"}
    process_db.write()
    return process_db


def test_kill_9_with_jobs_in_flight_then_restart_loses_nothing(cfg, tmp_path):
    marker = tmp_path / "m"
    marker.mkdir()
    ids = ledger(cfg, "enqueue", stress_jobs(8, marker, sleep=1.0))
    daemon = start_workers(cfg, "--threads", "2")
    try:
        wait_for(lambda: len(list(marker.glob("*.start"))) >= 2, what="two jobs running")
    finally:
        daemon.kill()  # SIGKILL: no drain, no cleanup (and never left running when the wait fails)
        daemon.wait()
    in_flight = [j for j in ledger(cfg) if j["status"] == "running" and j["command"] == "poll"]
    assert len(in_flight) == 2

    restarted = start_workers(cfg, "--threads", "2", "--once")
    out = restarted.communicate(timeout=120)[0]
    assert restarted.returncode == 0, out
    jobs = {j["id"]: j for j in ledger(cfg) if j["command"] == "poll"}
    assert set(jobs) == set(ids)
    assert all(j["status"] == "succeeded" for j in jobs.values()), jobs
    for job in in_flight:
        recovered = jobs[job["id"]]
        assert recovered["attempt"] == 2
        assert any("is gone" in reason for _, reason in recovered["transitions"])
    assert "recovering their jobs" in out


@pytest.mark.parametrize(
    ("sidecar", "warnings"),
    [
        # The daemon runs unannounced; other processes' writes keep the settings' automatic checkpoint.
        (".checkpointer", 0),
        # Writes go on behind SQLite's own lock, and the daemon says so once in its log.
        (".write-gate", 1),
    ],
)
def test_the_daemon_and_other_writers_go_on_without_a_lock_file_beside_the_database(cfg, tmp_path, sidecar, warnings):
    """`<database><sidecar>` cannot be opened (here a directory in its place; a full disk would
    refuse to create it): an enqueue and the daemon's jobs go on."""
    if cfg.database_url:
        pytest.skip("a SQLite file's lock file")
    Path(f"{cfg.db_path}{sidecar}").mkdir(parents=True)
    marker = tmp_path / "m"
    marker.mkdir()
    ids = ledger(cfg, "enqueue", stress_jobs(3, marker))
    daemon = start_workers(cfg, "--threads", "2", "--once")
    out = daemon.communicate(timeout=120)[0]
    assert daemon.returncode == 0, out
    assert {j["id"]: j["status"] for j in ledger(cfg) if j["command"] == "poll"} == dict.fromkeys(ids, "succeeded")
    said = [line for line in out.splitlines() if f"{cfg.db_path}{sidecar}" in line]
    assert len(said) == warnings, out


def test_two_daemons_on_one_database_never_run_a_job_twice(cfg, tmp_path):
    # Caps are global (counted from running rows), so give room for both daemons' threads.
    cfg.service["max_workers"] = 4
    cfg.plugins["stress"]["parallelism"] = 4
    cfg.write()
    marker = tmp_path / "m"
    marker.mkdir()
    ids = ledger(cfg, "enqueue", stress_jobs(60, marker, sleep=0.1))
    first = start_workers(cfg, "--threads", "2")
    second = start_workers(cfg, "--threads", "2")
    try:
        wait_for(lambda: sum(starts_per_job(marker).values()) >= 60, timeout=120, what="every job to start")
        wait_for(
            lambda: all(j["status"] == "succeeded" for j in ledger(cfg) if j["command"] == "poll"),
            timeout=60,
            what="all succeeded",
        )
    finally:
        stop(first)
        stop(second)
    starts = starts_per_job(marker)
    assert set(starts) == set(ids)
    assert max(starts.values()) == 1, "a job ran more than once"
    owners = collections.Counter(j["claimed_by"] for j in ledger(cfg) if j["command"] == "poll")
    assert len(owners) == 2, f"both daemons should have claimed work: {owners}"


def test_sigterm_stops_claiming_and_waits_for_in_flight_jobs(cfg, tmp_path):
    marker = tmp_path / "m"
    marker.mkdir()
    ledger(cfg, "enqueue", stress_jobs(1, marker, sleep=2.0) + stress_jobs(3, marker, sleep=0.1))
    daemon = start_workers(cfg, "--threads", "1")
    wait_for(lambda: len(list(marker.glob("*.start"))) >= 1, what="the slow job to start")
    out = stop(daemon)
    assert daemon.returncode == 0, out
    statuses = collections.Counter(j["status"] for j in ledger(cfg) if j["command"] == "poll")
    assert statuses == {"succeeded": 1, "queued": 3}, out


def test_sighup_reload_cancels_removed_plugins_and_keeps_old_config_when_invalid(cfg, tmp_path):
    marker = tmp_path / "m"
    marker.mkdir()
    stress_ids = ledger(cfg, "enqueue", stress_jobs(2, marker))
    daemon = start_workers(cfg, "--plugins", "echo", "--interval", "0.2")  # a worker group: stress waits
    output = Output(daemon)
    try:
        # Logged after its signal handlers are in place: a SIGHUP before would end the process.
        output.wait_for("runworkers started")
        doc = yaml.safe_load((cfg.path / "config.yaml").read_text())
        del doc["plugins"]["stress"]
        (cfg.path / "config.yaml").write_text(yaml.safe_dump(doc))
        daemon.send_signal(signal.SIGHUP)
        wait_for(
            lambda: all(j["status"] == "dead" for j in ledger(cfg) if j["id"] in stress_ids),
            what="removed plugin's jobs to go dead",
        )
        assert all("removed or disabled" in j["last_error"] for j in ledger(cfg) if j["id"] in stress_ids)

        (cfg.path / "config.yaml").write_text("service: [unclosed\n")
        daemon.send_signal(signal.SIGHUP)
        output.wait_for("config reload failed; keeping the running config")
        assert daemon.poll() is None, "an invalid config must not take the daemon down"
        echo_id = ledger(cfg, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}])[0]
        wait_for(
            lambda: any(j["id"] == echo_id and j["status"] == "succeeded" for j in ledger(cfg)),
            what="the old config to keep running jobs",
        )
    finally:
        stop_gracefully(daemon)
    assert "config reload failed; keeping the running config" in output.finish()


def test_failing_init_marks_plugin_unhealthy_and_config_change_reruns_init(cfg):
    cfg.plugins["stress"]["config"] = {"init_fails": True}
    cfg.write()
    proc = start_workers(cfg, "--once")
    proc.communicate(timeout=60)
    code = ductile(cfg, "system", "status", "--json")
    assert '"stress": "init refused by config.init_fails"' in code.stdout
    cfg.plugins["stress"]["config"] = {"init_fails": False}
    cfg.write()
    proc = start_workers(cfg, "--once")
    proc.communicate(timeout=60)
    inits = [j for j in ledger(cfg) if j["command"] == "init"]
    assert [j["status"] for j in inits] == ["failed", "succeeded"]
    assert '"plugins_unhealthy": {}' in ductile(cfg, "system", "status", "--json").stdout
    proc = start_workers(cfg, "--once")
    proc.communicate(timeout=60)
    assert len([j for j in ledger(cfg) if j["command"] == "init"]) == 2, "unchanged config must not re-run init"


def test_second_signal_forces_exit_and_the_job_is_recovered_on_restart(cfg, tmp_path):
    marker = tmp_path / "m"
    marker.mkdir()
    (job_id,) = ledger(cfg, "enqueue", stress_jobs(1, marker, sleep=4))
    daemon = start_workers(cfg, "--threads", "1")
    wait_for(lambda: list(marker.glob("*.start")), what="the job to start")
    plugin_pid = int(next(marker.glob("*.start")).name.split(".")[1])
    output = Output(daemon)
    daemon.send_signal(signal.SIGTERM)
    output.wait_for("no new claims; waiting for in-flight jobs")  # the first signal was handled
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(timeout=30)
    out = output.finish()
    assert daemon.returncode == 130, out
    # Forced: it exited without waiting for the in-flight job, which is still `running` in the ledger.
    assert next(j for j in ledger(cfg) if j["id"] == job_id)["status"] == "running", out
    wait_for(lambda: not Path(f"/proc/{plugin_pid}").exists(), timeout=5, what="the plugin to be killed")
    restarted = start_workers(cfg, "--once")
    out = restarted.communicate(timeout=120)[0]
    job = next(j for j in ledger(cfg) if j["id"] == job_id)
    assert job["status"] == "succeeded" and job["attempt"] == 2, (out, job)


def test_a_draining_daemon_keeps_the_sqlite_log_short(process_db):
    """Once the claims since the last checkpoint filled about CHECKPOINT_PAGES of log, the main
    loop copies it into the database file, the last of it with the write gate held, so the log
    starts over instead of growing until a COMMIT checkpoints it with the gate held
    (docs/performance-history.md, items 42 and 44). The `quick` test plugin answers at once: hundreds of
    jobs a second, far more than the main loop's four passes a second."""
    if process_db.database_url:
        pytest.skip("a SQLite file's log")
    process_db.plugins = {"quick": {"config": {}, "parallelism": 2}}
    process_db.write()
    jobs = 1000  # ~20 pages of log each: 20,000 pages if the log never started over
    ledger(process_db, "enqueue", [{"plugin": "quick", "command": "poll", "submitted_by": "cli"}] * jobs)
    log = Path(f"{process_db.db_path}-wal")
    daemon = start_workers(process_db, "--threads", "2", "--max-jobs", str(jobs))
    output = Output(daemon)  # read as it comes: one line per job would fill the pipe
    longest, deadline = 0, time.monotonic() + 120
    while daemon.poll() is None and time.monotonic() < deadline:
        try:
            longest = max(longest, log.stat().st_size)
        except FileNotFoundError:
            pass  # not yet, or no more: the last connection to close removes the log
        time.sleep(0.005)
    if daemon.poll() is None:
        daemon.kill()
    assert daemon.wait() == 0, output.finish()
    assert collections.Counter(j["status"] for j in ledger(process_db)) == {"succeeded": jobs}
    # CHECKPOINT_PAGES and what the jobs claimed during the checkpoint wrote, far from where the
    # other processes' COMMITs would checkpoint beside a daemon.
    assert longest < CHECKPOINT_PAGES * 1.5 * 4120 < BESIDE_CHECKPOINTER_PAGES * 4120, (
        f"the log reached {longest // 4120} pages"
    )
