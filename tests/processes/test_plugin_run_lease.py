"""`ductile plugin run` runs its job in the foreground, through the claim path, while daemons may
be running on the same ledger. A job that outlives `service.lease_ttl` must stay the CLI's: a
daemon's recovery pass took it over (its lease had run out, nothing renewed it), gave it a second
attempt, and refused the CLI's own result as a lost owner's, so the user saw a failure for a job
that had succeeded."""

from __future__ import annotations

import json

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.output import Output
from tests.support.processes import ductile, ductile_json, start_workers, stop_gracefully
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.process, pytest.mark.postgres]


def test_a_plugin_run_longer_than_the_lease_keeps_its_job_while_a_daemon_recovers(config_dir: ConfigDir) -> None:
    config_dir.service.update(lease_ttl="5s")
    config_dir.plugins["stress"]["timeout"] = "30s"
    config_dir.write()
    # A daemon that claims only echo, so it never runs stress itself, but whose recovery passes
    # (every 2.5 s here) look at every running job.
    daemon = start_workers(config_dir, "--plugins", "echo")
    said = Output(daemon)
    try:
        wait_for(
            lambda: ductile_json(config_dir, "system", "status")[1].get("workers"),
            60,
            what="the daemon",
            explain=lambda: said.text,
        )
        ran = ductile(config_dir, "plugin", "run", "stress", "--payload", json.dumps({"sleep": 9}), "--json")
        assert ran.returncode == 0, (ran.stdout, ran.stderr, said.text[-3000:])
        job = json.loads(ran.stdout)
        code, seen = ductile_json(config_dir, "job", "inspect", job["job_id"])
        assert code == 0 and (seen["status"], seen["attempt"]) == ("succeeded", 1), seen
        assert "recovered" not in said.text, said.text[-3000:]
    finally:
        stop_gracefully(daemon)
