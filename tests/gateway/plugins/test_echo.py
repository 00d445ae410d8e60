"""The bundled `echo` against the original's manifest: `poll` is a write command, and `mode`
forces the original's failure paths (error, hang, protocol_error) on every command."""

from __future__ import annotations

import pytest

from ledger.states import JobStatus
from tests.support.jobs import last_response, run_jobs
from tests.support.processes import ductile_json
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.process
def test_poll_is_the_originals_write_command_and_mode_a_declared_config_key(config_dir):
    config_dir.plugins["echo"] = {"config": {"message": "hi", "mode": ""}}
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.write()
    code, body = ductile_json(config_dir, "config", "check", "--strict")
    assert (code, body["warnings"]) == (0, [])  # `mode` is declared: no "may be ignored" warning
    code, skills = ductile_json(config_dir, "skills")
    tiers = {s["name"]: s["tier"] for s in skills["skills"]}
    assert (tiers["plugin.echo.poll"], tiers["plugin.echo.handle"], tiers["plugin.echo.health"]) == (
        "WRITE",
        "WRITE",
        "READ",
    )


def test_mode_forces_the_originals_failure_paths_on_every_command(config_dir):
    config_dir.plugins["failing"] = {"uses": "echo", "config": {"mode": "error"}}
    config_dir.plugins["broken"] = {"uses": "echo", "config": {"mode": "protocol_error"}}
    config_dir.plugins["stuck"] = {"uses": "echo", "config": {"mode": "hang"}, "timeout": "300ms"}
    holder = load_runtime(config_dir)
    table = [(name, command, None) for name in ("failing", "broken") for command in ("poll", "handle", "health")]
    jobs = run_jobs(holder, [*table, ("stuck", "health", None), ("echo", "poll", {"message": "yo"})], max_attempts=1)
    failing, broken, stuck, fine = jobs[:3], jobs[3:6], jobs[6], jobs[7]
    assert {(j.status, j.last_error) for j in failing} == {(JobStatus.FAILED, "echo plugin forced error (mode=error)")}
    assert [(j.status, "protocol error" in (j.last_error or "")) for j in broken] == [(JobStatus.DEAD, True)] * 3
    assert (stuck.status, (stuck.last_error or "").split(":")[0]) == (JobStatus.DEAD, "timed out after 0.3s")
    # Without a mode, poll still answers and emits echo.poll, as the demo's routes expect.
    assert last_response(fine)["result"] == "Echoed: yo"
    assert [e["type"] for e in last_response(fine)["events"]] == ["echo.poll"]
