"""Nodes as first-class (issue 38): every worker daemon's row, with its host, group, version and
slots, listed live or lost by `GET /system/nodes` and `system status`; and a plugin with queued
jobs that no live node runs, which waited without a word before, named by `/healthz`
(`plugins_unserved`), `system doctor` (CLI and API) and `system status`. Real rows, real queue."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient
from rich.console import Console

from gateway.cli.watch import render
from gateway.daemon.presence import Presence
from gateway.reports.live import build_snapshot
from gateway.runtime import RUNTIME
from ledger.models import Job, JobSpec, WorkerInstance
from ledger.submitters import Submitter
from pipelines.dsl import SWITCH
from tests.support.processes import ductile
from tests.support.runtime import installed_runtime

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TOKENS = {"admin": ["*"], "reader": ["jobs:ro"], "status": ["jobs:status:ro"], "plugin-ro": ["plugin:ro"]}
# Every field /healthz had before `plugins_unserved`: none of them goes (spec 000 §10.3 and the
# API reference's "System Health").
HEALTH_FIELDS = {
    "status",
    "uptime_seconds",
    "queue_depth",
    "plugins_loaded",
    "plugins_circuit_open",
    "workers",
    "config_path",
    "binary_path",
    "version",
}


@pytest.fixture
def api(config_dir):
    config_dir.service["worker_groups"] = {"media": ["echo", "probe"]}
    config_dir.extra["api"] = {
        "enabled": True,
        "auth": {"tokens": [{"name": n, "token": f"tok-{n}", "scopes": s} for n, s in TOKENS.items()]},
    }
    with installed_runtime(config_dir):
        yield APIClient()


def get(client: APIClient, path: str, token: str = "admin"):
    client.credentials(HTTP_AUTHORIZATION=f"Bearer tok-{token}")
    return client.get(path)


def node(worker_id: str, host: str, *, plugins: str = "", group: str = "", heard: float = 0.0) -> WorkerInstance:
    """A worker daemon's row as it registers, last heard from `heard` seconds ago."""
    row = WorkerInstance.objects.register(
        worker_id, hostname=host, pid=4000 + len(worker_id), threads=4, plugins=plugins, version="9.9.9", group=group
    )
    WorkerInstance.objects.filter(pk=row.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=heard))
    return row


def enqueue(plugin: str, count: int = 1) -> None:
    for _ in range(count):
        Job.objects.enqueue(JobSpec(plugin, "poll", Submitter.CLI), default_dedupe_ttl=0)


def cli(*args: str) -> dict:
    out = io.StringIO()
    try:
        call_command(*args, "--json", stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        assert exc.code in (0, None), out.getvalue()
    return json.loads(out.getvalue())


def test_the_nodes_are_listed_live_then_lost_with_host_group_version_and_slots(api):
    node("a:1:x", "host-a")
    node("b:2:x", "host-b", plugins="echo,probe", group="media")
    node("c:3:x", "host-c", heard=120)  # silent past its lease (60 s): its jobs are taken over
    lost = node("d:4:x", "host-d", heard=30)
    WorkerInstance.objects.mark_lost([lost.id], timezone.now())  # found dead on its host
    node("e:5:x", "host-e").stop(timezone.now())  # drained and gone on purpose: not a node now
    node("f:6:x", "host-f", heard=2 * 86400)  # not heard from for two days: no longer listed
    answer = get(api, "/system/nodes", "reader")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [(n["hostname"], n["liveness"]) for n in body["nodes"]] == [
        ("host-a", "live"),
        ("host-b", "live"),
        ("host-c", "lost"),
        ("host-d", "lost"),
    ]
    assert (body["live"], body["lost"], body["unserved"]) == (2, 2, [])
    media = body["nodes"][1]
    assert media["group"] == "media" and media["plugins"] == ["echo", "probe"]
    assert (media["id"], media["version"], media["slots"], media["state"]) == ("b:2:x", "9.9.9", 4, "running")
    assert body["nodes"][0]["group"] is None and body["nodes"][0]["plugins"] is None  # every plugin
    assert body["nodes"][3]["state"] == "lost"
    # The finer read scope is enough (jobs:ro grants it); a plugin-only token is refused.
    assert get(api, "/system/nodes", "status").status_code == 200
    assert get(api, "/system/nodes", "plugin-ro").status_code == 403
    # `system status` lists the same nodes, in its JSON and as a table.
    status = cli("system", "status")
    assert [n["id"] for n in status["nodes"]] == ["a:1:x", "b:2:x", "c:3:x", "d:4:x"]
    assert status["plugins_unserved"] == []
    text = io.StringIO()
    call_command("system", "status", stdout=text, stderr=io.StringIO())
    lines = text.getvalue().splitlines()
    start = lines.index("nodes: 2 live, 2 lost")
    header = ["HOST", "PID", "ROLES", "GROUP", "VERSION", "SLOTS", "LAST", "HEARTBEAT", "STATE"]
    assert lines[start + 1].split() == header
    # The heartbeat's age: a few seconds at most for host-b, two minutes (and a few seconds) for host-c.
    assert re.fullmatch(r"host-b 4005 workers media 9\.9\.9 4 \ds ago live", " ".join(lines[start + 3].split()))
    assert re.fullmatch(r"host-c 4005 workers \* 9\.9\.9 4 2m(\ds)? ago lost", " ".join(lines[start + 4].split()))


def test_an_api_node_and_a_scheduler_are_listed_with_their_roles_and_claim_nothing(api):
    """`system start --role api` and a standalone `runscheduler` keep rows of their own
    (gateway.daemon.presence): listed with their roles, never counted as workers nor as serving
    a plugin, and gone from the list once they stop."""
    front, clock = Presence({"api", "housekeeping"}, 60.0), Presence({"scheduler"}, 60.0)
    assert front.beat() == 15.0 and clock.beat() == 15.0  # the row, then a beat every quarter lease
    enqueue("echo")
    body = get(api, "/system/nodes", "reader").json()
    assert [(n["roles"], n["plugins"], n["slots"], n["liveness"]) for n in body["nodes"]] == [
        (["api", "housekeeping"], [], 0, "live"),
        (["scheduler"], [], 0, "live"),
    ]
    assert body["live"] == 2
    # No worker: echo's job waits, as every surface says.
    assert body["unserved"][0]["plugin"] == "echo"
    health = api.get("/healthz").json()
    assert (health["workers"], health["plugins_unserved"]) == (0, ["echo"])
    assert cli("system", "status")["workers"] == []
    (finding,) = [f for f in get(api, "/system/doctor").json()["findings"] if f["check"] == "unserved_plugin"]
    assert "no worker node is live" in finding["message"]
    # The rows move on with the heartbeat and end when their process does.
    WorkerInstance.objects.update(heartbeat_at=timezone.now() - timedelta(seconds=50))
    front._next = clock._next = 0.0
    front.beat()
    assert WorkerInstance.objects.get(pk=front.id).heartbeat_at > timezone.now() - timedelta(seconds=5)
    front.leave()
    clock.leave()
    assert get(api, "/system/nodes", "reader").json()["nodes"] == []


def test_a_plugin_no_live_node_runs_is_named_by_healthz_doctor_and_status(api):
    """Only the media group (echo, probe) is live; a lost node that ran every plugin does not
    count. stress's jobs wait: every surface names it, and nothing else (echo's job is served, and
    a pipeline's `if:` hop too: every node runs the core hops)."""
    node("b:2:x", "host-b", plugins="echo,probe", group="media")
    node("c:3:x", "host-c", heard=120)
    enqueue("stress", 2)
    enqueue("echo")
    enqueue(SWITCH)
    oldest = Job.objects.filter(plugin="stress").order_by("created_at")[0].created_at
    health = api.get("/healthz").json()
    assert health["plugins_unserved"] == ["stress"]
    assert set(health) >= HEALTH_FIELDS and health["status"] == "ok" and health["queue_depth"] == 4
    nodes = get(api, "/system/nodes").json()
    assert nodes["unserved"] == [
        {"plugin": "stress", "queued": 2, "oldest_queued_at": oldest.isoformat().replace("+00:00", "Z")}
    ]
    doctor = get(api, "/system/doctor").json()
    (finding,) = [f for f in doctor["findings"] if f["check"] == "unserved_plugin"]
    assert finding["severity"] == "warning" and doctor["healthy"] is True
    assert finding["message"].startswith("plugin 'stress' has 2 queued jobs")
    assert "host-b pid 4005 (group media): echo, probe" in finding["message"]
    assert "key service.worker_groups" in finding["where"]
    assert [f for f in cli("system", "doctor")["findings"] if f["check"] == "unserved_plugin"] == [finding]
    assert cli("system", "status")["plugins_unserved"] == nodes["unserved"]
    # The dashboard's and `system watch`'s snapshot (its page draws the nodes and the warning).
    snapshot = build_snapshot(RUNTIME.get())
    assert snapshot["unserved"] == nodes["unserved"] and snapshot["nodes"] == nodes["nodes"]
    terminal = Console(width=120, record=True, file=io.StringIO())
    terminal.print(render(snapshot, now=timezone.now(), where="here", width=120))  # `system watch`
    assert "unserved stress: 2 queued, no live node runs it (the oldest " in terminal.export_text()


def test_with_no_live_node_every_plugin_with_queued_jobs_is_unserved(api):
    enqueue("stress")
    enqueue("echo")
    assert api.get("/healthz").json()["plugins_unserved"] == ["echo", "stress"]
    messages = [f["message"] for f in get(api, "/system/doctor").json()["findings"] if f["check"] == "unserved_plugin"]
    assert len(messages) == 2 and all("no worker node is live" in m for m in messages)
    # A node that runs every plugin comes up: nothing waits unserved, and the queue is not read.
    node("a:1:x", "host-a")
    assert api.get("/healthz").json()["plugins_unserved"] == []


@pytest.mark.process
def test_doctor_without_a_readable_ledger_gives_the_configs_findings_and_says_what_it_left_out(config_dir):
    config_dir.extra["state"] = {"path": "/proc/no-such-dir/ductile.db"}  # cannot be created
    config_dir.write()
    run = ductile(config_dir, "system", "doctor", "--json")
    assert run.returncode == 0, run.stderr
    assert "untriggered_plugin" in {f["check"] for f in json.loads(run.stdout)["findings"]}
    assert "warning: the ledger could not be read, so unserved plugins are not checked: " in run.stderr
