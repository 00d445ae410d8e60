"""ts-bun-greet: py-greet's contract in TypeScript on Bun, run for real where Bun is installed
(CI installs it), and skipped at load, with the reason, where it is not (issue 34)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from ledger.models import PluginFact, PluginState
from ledger.states import JobStatus
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_response, run_job
from tests.support.processes import ductile_json
from tests.support.runtime import load_runtime

BUN = shutil.which("bun")
needs_bun = pytest.mark.skipif(BUN is None, reason="bun is not installed here (.ci/run installs it with npm)")

# The original's README example, verbatim.
EXAMPLE = {"enabled": True, "schedules": [{"every": "1m"}], "config": {"greeting": "Hi", "name": "Ductile"}}


@needs_bun
@pytest.mark.django_db(transaction=True)  # the jobs run on the worker's thread, on its own connection
def test_poll_answers_as_py_greet_does_and_records_a_snapshot_fact(config_dir: ConfigDir) -> None:
    config_dir.plugins["ts-bun-greet"] = EXAMPLE
    config_dir.plugins["py-greet"] = {"config": EXAMPLE["config"]}
    runtime = load_runtime(config_dir)
    runs = [run_job(runtime, "ts-bun-greet"), run_job(runtime, "ts-bun-greet")]
    twin = last_response(run_job(runtime, "py-greet"))
    assert [job.status for job in runs] == [JobStatus.SUCCEEDED] * 2
    response = last_response(runs[1])
    assert response["result"] == twin["result"] == "Hi, Ductile!"
    assert response["state_updates"].keys() == twin["state_updates"].keys() == {"last_run", "last_greeting"}
    assert response["state_updates"]["last_run"].endswith("Z")
    assert response["logs"] == [{"level": "info", "message": f"Hi, Ductile! (job {runs[1].id})"}]
    facts = list(PluginFact.objects.filter(plugin_name="ts-bun-greet").order_by("seq"))
    assert [f.fact_type for f in facts] == ["ts-bun-greet.snapshot"] * 2
    assert facts[1].fact_json == response["state_updates"]
    assert PluginState.current("ts-bun-greet") == facts[1].fact_json


@needs_bun
@pytest.mark.django_db(transaction=True)  # the jobs run on the worker's thread, on its own connection
def test_health_is_healthy_and_records_no_fact(config_dir: ConfigDir) -> None:
    config_dir.plugins["ts-bun-greet"] = {"config": {}}
    job = run_job(load_runtime(config_dir), "ts-bun-greet", command="health")
    assert job.status == JobStatus.SUCCEEDED and last_response(job)["result"] == "healthy"
    assert not PluginFact.objects.filter(plugin_name="ts-bun-greet").exists()


@pytest.mark.process
@needs_bun
def test_config_check_strict_passes_the_originals_example(config_dir: ConfigDir) -> None:
    config_dir.plugins = {"ts-bun-greet": EXAMPLE}
    config_dir.extra = {"api": {"enabled": False}}  # strict mode would also want an API token
    config_dir.write()
    code, body = ductile_json(config_dir, "config", "check", "--strict")
    assert (code, body["errors"]) == (0, []), body


@pytest.mark.process
def test_without_bun_it_is_skipped_with_the_reason_in_plugin_list_doctor_and_strict_check(
    config_dir: ConfigDir, tmp_path: Path
) -> None:
    # A PATH with Python on it (py-greet still loads) and no Bun.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    config_dir.plugins["ts-bun-greet"] = EXAMPLE
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.write()
    env = {"PATH": str(bin_dir)}
    reason = (
        f"interpreter 'bun' is not on the plugins' PATH ({bin_dir}) "
        "(entrypoint run.ts starts with '#!/usr/bin/env bun')"
    )

    code, listing = ductile_json(config_dir, "plugin", "list", **env)
    assert code == 0
    assert {"name": "ts-bun-greet", "reason": reason} in listing["skipped"]
    assert "py-greet" in {p["name"] for p in listing["plugins"]}
    # A plugin not configured is listed as one that could not run here either (bash is missing too).
    assert "interpreter 'bash'" in {c["name"]: c["reason"] for c in listing["cannot_run"]}["restic_backup"]

    code, doctor = ductile_json(config_dir, "system", "doctor", **env)
    assert code == 1
    assert {
        "check": "interpreter_missing",
        "severity": "error",
        "message": f"plugin 'ts-bun-greet' is enabled but cannot run: {reason}",
    }.items() <= next(f for f in doctor["findings"] if f["check"] == "interpreter_missing").items()

    code, check = ductile_json(config_dir, "config", "check", "--strict", **env)
    assert code == 78 and any(reason in e["message"] for e in check["errors"]), check
