"""Hostile plugins against the real daemon and real plugin processes (issue 12, defects 2, 5, 6, 7).

Spec 000 §5.7 (every failure but exit 78 and `retry: false` is retried), §6 and §11.4 (stdout is
the protocol response; anything else is a protocol error, captured for debugging), idiom 2
(spawn-per-command: a plugin's lifetime is one invocation).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile_json, ledger, start_workers, stop_gracefully
from tests.support.waiting import wait_for


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting for its parent."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextmanager
def left_behind(marker: Path, name: str = "child") -> Iterator[int]:
    """The pid a hostile plugin wrote to `marker/<name>.pid`, killed after the test whatever happens."""
    pid = int((marker / f"{name}.pid").read_text())
    try:
        yield pid
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def hostile(mode: str, marker: Path | None = None, max_attempts: int = 1, **payload) -> dict:
    if marker is not None:
        payload["marker_dir"] = str(marker)
    return {
        "plugin": "hostile",
        "command": "poll",
        "submitted_by": "cli",
        "max_attempts": max_attempts,
        "payload": {"mode": mode, **payload},
    }


def run_once(cfg: ConfigDir, timeout: float = 120) -> str:
    """`runworkers --once`: run what is runnable now, then exit, as an operator would."""
    proc = start_workers(cfg, "--once", "--threads", "1")
    try:
        out = proc.communicate(timeout=timeout)[0]
    finally:
        stop_gracefully(proc, timeout=5)
    assert proc.returncode == 0, out
    return out


def job_of(cfg: ConfigDir, job_id: str) -> dict:
    return next(j for j in ledger(cfg) if j["id"] == job_id)


def logs_of(cfg: ConfigDir, job_id: str) -> list[dict]:
    code, body = ductile_json(cfg, "job", "logs", "--job-id", job_id, "--include-result")
    assert code == 0, body
    return body["logs"] if isinstance(body, dict) else body


@pytest.fixture
def cfg(process_db):
    process_db.plugins["hostile"] = {"config": {}, "timeout": "20s"}
    process_db.write()
    return process_db


# -- defect 2: a response the parser cannot judge --------------------------------------------


@pytest.mark.postgres
@pytest.mark.process
def test_deeply_nested_answer_fails_the_attempt_as_a_retryable_protocol_error(cfg):
    (job_id,) = ledger(cfg, "enqueue", [hostile("deep_json", max_attempts=2)])
    out = run_once(cfg)
    job = job_of(cfg, job_id)
    # Never left `running` (where it held a parallelism slot and, heartbeated, was never recovered).
    assert job["status"] == "queued" and job["attempt"] == 2, (job, out)
    assert [to for to, _ in job["transitions"]][-3:] == ["running", "failed", "queued"]
    failed_reason = job["transitions"][-2][1]
    assert "protocol error" in failed_reason and "nest" in failed_reason, failed_reason
    assert "Traceback" not in out and "RecursionError" not in out


@pytest.mark.process
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("mode", "why"),
    [("unstorable", "NUL characters or unpaired surrogates"), ("nan", "NaN is not JSON")],
)
def test_valid_looking_json_the_ledger_cannot_store_is_a_protocol_error_on_every_backend(cfg, mode, why):
    (job_id,) = ledger(cfg, "enqueue", [hostile(mode)])
    run_once(cfg)
    job = job_of(cfg, job_id)
    assert job["status"] == "dead", job
    assert "protocol error" in job["last_error"] and why in job["last_error"], job["last_error"]


@pytest.mark.process
@pytest.mark.postgres
def test_an_outcome_the_database_refuses_still_ends_the_attempt(cfg):
    """The backstop: an event type wider than the event log's column is refused by PostgreSQL in
    the outcome's transaction (SQLite does not enforce widths, so there the job succeeds). Either
    way the job ends; it never stays `running`."""
    (job_id,) = ledger(cfg, "enqueue", [hostile("long_event_type")])
    out = run_once(cfg)
    job = job_of(cfg, job_id)
    assert job["status"] in ("succeeded", "dead"), (job, out)
    if job["status"] == "dead":
        assert job["last_error"].startswith("internal error: "), job["last_error"]


# -- defect 7: hostile output ----------------------------------------------------------------


@pytest.mark.process
@pytest.mark.postgres
def test_invalid_utf8_on_stdout_is_a_protocol_error_not_replacement_characters(cfg):
    (job_id,) = ledger(cfg, "enqueue", [hostile("bad_utf8")])
    run_once(cfg)
    job = job_of(cfg, job_id)
    assert job["status"] == "dead", job
    assert "protocol error" in job["last_error"] and "UTF-8" in job["last_error"], job["last_error"]
    (log,) = logs_of(cfg, job_id)
    assert "\ufffd" not in json.dumps(log["result"], ensure_ascii=False)
    assert "\\xe9" in log["result"], log["result"]  # the bad bytes shown, escaped, for debugging


@pytest.mark.process
@pytest.mark.postgres
def test_a_10_mib_unusable_stdout_is_stored_as_a_capped_excerpt(cfg):
    (job_id,) = ledger(cfg, "enqueue", [hostile("junk", mib=10)])
    run_once(cfg)
    job = job_of(cfg, job_id)
    assert job["status"] == "dead" and "protocol error" in job["last_error"], job
    (log,) = logs_of(cfg, job_id)
    assert isinstance(log["result"], str)
    assert len(log["result"].encode()) < 65 * 1024, len(log["result"])
    assert log["result"].startswith("not json not json")
    assert "10485760 bytes" in log["result"], log["result"][-300:]


@pytest.mark.process
@pytest.mark.postgres
def test_nul_and_undecodable_bytes_on_stderr_are_stored_visibly(cfg):
    (job_id,) = ledger(cfg, "enqueue", [hostile("nul_stderr")])
    run_once(cfg)
    assert job_of(cfg, job_id)["status"] == "succeeded"
    (log,) = logs_of(cfg, job_id)
    assert log["stderr"] == "nul \\x00 and \\xff\n", log["stderr"]


@pytest.mark.django_db(transaction=True)  # the jobs run on the worker's thread, on its own connection
def test_a_valid_large_response_is_kept_in_full(runtime):
    from tests.support.jobs import last_response, run_job

    job = run_job(runtime, "stress", payload={"result_bytes": 200_000})
    assert job.status == "succeeded"
    assert last_response(job)["result"] == "x" * 200_000


# -- defects 5 and 6: processes a plugin leaves behind ---------------------------------------


@pytest.mark.postgres
@pytest.mark.process
def test_children_left_behind_after_the_answer_are_killed(cfg, tmp_path):
    (job_id,) = ledger(cfg, "enqueue", [hostile("leave_child", tmp_path)])
    run_once(cfg)
    with left_behind(tmp_path) as child:
        assert job_of(cfg, job_id)["status"] == "succeeded"
        wait_for(lambda: not alive(child), timeout=5, what="the plugin's leftover child to be killed")


@pytest.mark.postgres
@pytest.mark.process
def test_a_child_holding_stdout_open_does_not_turn_a_valid_answer_into_a_timeout(cfg, tmp_path):
    cfg.plugins["hostile"]["timeout"] = "8s"
    cfg.write()
    (job_id,) = ledger(cfg, "enqueue", [hostile("hold_stdout", tmp_path, max_attempts=2)])
    run_once(cfg)
    with left_behind(tmp_path) as child:
        job = job_of(cfg, job_id)
        # An answer that waited for the plugin's timeout would have been a timeout, not a success.
        assert job["status"] == "succeeded" and job["attempt"] == 1, job
        wait_for(lambda: not alive(child), timeout=5, what="the child holding stdout to be killed")


@pytest.mark.postgres
@pytest.mark.process
def test_a_child_escaping_with_setsid_is_killed_and_reported(cfg, tmp_path):
    (job_id,) = ledger(cfg, "enqueue", [hostile("setsid_child", tmp_path)])
    out = run_once(cfg)
    with left_behind(tmp_path) as child:
        assert job_of(cfg, job_id)["status"] == "succeeded"
        wait_for(lambda: not alive(child), timeout=5, what="the escaped child to be killed")
    (log,) = logs_of(cfg, job_id)
    assert f"[ductile] warning: process {child} " in log["stderr"], log["stderr"]
    assert "left the plugin's process group (setsid?)" in log["stderr"]
    assert f"process {child} " in out and "setsid" in out, out


@pytest.mark.django_db(transaction=True)  # the jobs run on the worker's thread, on its own connection
def test_an_escaped_process_holding_stdout_delays_the_answer_by_a_second_at_most(config_dir, tmp_path):
    """Where no subreaper adopts it (a one-shot `plugin run`, or here, in-process), a process
    that left the group with stdout open cannot be killed: the answer is taken 1 s after the
    plugin exited, with a warning, not at the timeout."""
    from tests.support.jobs import last_log, run_job
    from tests.support.runtime import installed_runtime

    config_dir.plugins["hostile"] = {"config": {}, "timeout": "20s"}
    with installed_runtime(config_dir) as holder:
        job = run_job(holder, "hostile", payload={"mode": "setsid_holds_stdout", "marker_dir": str(tmp_path)})
    with left_behind(tmp_path):
        # Taken at the timeout, the answer would have been a timeout, not a success.
        assert job.status == "succeeded", job.last_error
        assert "[ductile] warning: the plugin's output was still held open 1s after it exited" in (
            last_log(job).stderr or ""
        )


@pytest.mark.postgres
@pytest.mark.process
def test_plugins_and_their_children_die_with_a_daemon_killed_with_sigkill(cfg, tmp_path):
    ledger(cfg, "enqueue", [hostile("sleep", tmp_path, seconds=120)])
    daemon = start_workers(cfg, "--threads", "1")
    try:
        wait_for(lambda: (tmp_path / "plugin.pid").exists(), timeout=30, what="the plugin to start")
    finally:
        daemon.kill()  # SIGKILL: no drain, no cleanup
        daemon.wait()
    with left_behind(tmp_path, "plugin") as plugin, left_behind(tmp_path) as child:
        wait_for(lambda: not alive(plugin), timeout=5, what="the plugin to die with its daemon")
        wait_for(lambda: not alive(child), timeout=5, what="the plugin's child to die with its daemon")
