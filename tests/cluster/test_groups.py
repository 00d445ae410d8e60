"""Worker groups across nodes (issue 38, "Roles" and "Nodes as first-class"), each node a network
namespace on one PostgreSQL ledger: a `--group media` node claims only its group's plugin; the
job of a plugin no live node runs waits, and the operator's machine (the host, over the bridge)
is told which by `system status` and `system doctor`, until a node that runs it starts."""

from __future__ import annotations

import signal

import pytest

from tests.support.cluster import available, cluster
from tests.support.config_dirs import ConfigDir
from tests.support.output import Output
from tests.support.processes import ductile_json, ledger
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.process, pytest.mark.skipif(available() is not None, reason=str(available()))]


def jobs(config: ConfigDir, plugin: str) -> list[str]:
    return [j["status"] for j in ledger(config) if j["plugin"] == plugin and j["command"] == "poll"]


def unserved(config: ConfigDir) -> list[str]:
    code, doctor = ductile_json(config, "system", "doctor")
    assert code == 0, doctor
    return [f["message"].split("'")[1] for f in doctor["findings"] if f["check"] == "unserved_plugin"]


def test_a_group_node_runs_its_group_and_what_no_node_runs_is_named_until_one_does(config_dir: ConfigDir) -> None:
    config_dir.service.update(max_workers=2, worker_groups={"media": ["echo"]})
    polls = [{"plugin": plugin, "command": "poll", "submitted_by": "cli"} for plugin in ("echo", "stress")]
    with cluster(("a", "b")) as made:
        config_dir.database_url = made.database_url
        config_dir.write()
        ledger(config_dir, "enqueue", polls)
        a = made.start("a", config_dir, "runworkers", "--group", "media")
        a_output = Output(a)
        wait_for(lambda: jobs(config_dir, "echo") == ["succeeded"], timeout=60, interval=0.3, what="node a's echo")
        assert jobs(config_dir, "stress") == ["queued"]
        assert unserved(config_dir) == ["stress"]
        code, status = ductile_json(config_dir, "system", "status")
        assert code == 0
        (node,) = status["nodes"]
        assert (node["group"], node["plugins"], node["liveness"], node["slots"]) == ("media", ["echo"], "live", 2)
        assert [u["plugin"] for u in status["plugins_unserved"]] == ["stress"]

        b = made.start("b", config_dir, "runworkers")  # no group: every plugin
        b_output = Output(b)
        wait_for(lambda: jobs(config_dir, "stress") == ["succeeded"], timeout=60, interval=0.3, what="node b's stress")
        assert unserved(config_dir) == []
        live = ductile_json(config_dir, "system", "status")[1]["nodes"]
        assert sorted((n["group"] or "*", n["liveness"]) for n in live) == [("*", "live"), ("media", "live")]
        for proc in (a, b):
            proc.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0, a_output.finish()
        assert b.wait(timeout=60) == 0, b_output.finish()
