"""A worker node of a named group, as `system start --role api,workers --group media` runs it (no
scheduler, no housekeeping), seen by a person and an agent (issue 38, "Nodes as first-class"):
the dashboard lists the node's worker daemon with its group, version and slots and its API
process with its role, and warns, without a reload, of
a plugin whose queued job no live node runs; `/healthz` names that plugin, `system doctor` finds
it; the node's own plugin runs. Screenshots are saved to be looked at."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.version import gateway_version
from tests.support.config_dirs import ConfigDir
from tests.support.live_api import LiveApi, live_api
from tests.support.processes import ductile, ductile_json
from tests.support.waiting import wait_for

PASSWORD = "correct horse battery"
TOKEN = "tok-admin"


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[tuple[LiveApi, ConfigDir]]:
    cfg = ConfigDir(tmp_path_factory.mktemp("nodes") / "config")
    cfg.service["worker_groups"] = {"media": ["echo", "probe"]}
    tokens = [{"name": "admin", "token": TOKEN, "scopes": ["*"]}]
    with live_api(cfg, tokens, roles=["--role", "api,workers", "--group", "media"]) as served:
        made = ductile(cfg, "admin", "create-user", "ada", "--role", "auditor", "--password-stdin", input=PASSWORD)
        assert made.returncode == 0, made.stderr
        yield served, cfg


def trigger(served: LiveApi, plugin: str, **payload) -> str:
    code, body = served.api.call("POST", f"/plugin/{plugin}/poll", {"payload": payload})
    assert code == 202, body
    return body["job_id"]


def nodes(served: LiveApi) -> dict:
    return served.api.call("GET", "/system/nodes")[1]


def unserved_count(served: LiveApi, plugin: str) -> int:
    unserved = nodes(served)["unserved"]
    return next((u["queued"] for u in unserved if u["plugin"] == plugin), 0)


def status_of(served: LiveApi, job_id: str) -> str:
    return served.api.call("GET", f"/job/{job_id}")[1]["status"]


def test_a_group_node_is_listed_and_a_plugin_it_leaves_out_is_warned_of(node, browser):
    served, cfg = node
    # Live, and the worker's version recorded: at the daemon's first pass, off its start
    # (WorkerDaemon._main_loop). Two rows: the worker daemon, and `system start` itself for its
    # listeners (the api role), which claims nothing.
    wait_for(
        lambda: nodes(served)["live"] == 2 and all(n["version"] for n in nodes(served)["nodes"]),
        30,
        what="the node's rows",
    )
    by_role = {",".join(n["roles"]): n for n in nodes(served)["nodes"]}
    assert sorted(by_role) == ["api", "workers"], by_role
    row, front = by_role["workers"], by_role["api"]
    assert (row["group"], row["plugins"], row["version"], row["slots"]) == (
        "media",
        ["echo", "probe"],
        gateway_version(),
        2,
    )
    assert (front["pid"], front["plugins"], front["slots"], front["version"]) == (
        served.proc.pid,
        [],
        0,
        gateway_version(),
    )
    assert "started runscheduler" not in served.output.text  # not this node's role

    browser.base = f"http://127.0.0.1:{served.port}"
    browser.log_in("ada", PASSWORD)
    wait_for(lambda: browser.find_all("#user-tools"), 20, what="the login")
    browser.open("/dashboard/")
    wait_for(lambda: browser.find("#dash-status").get_attribute("data-state") == "live", 20, what="the stream")
    node_row = f"#nodes-table tr[data-node='{row['id']}']"
    wait_for(lambda: browser.find_all(node_row), 10, what="the node on the dashboard")
    cells = browser.find(node_row).text
    assert "media" in cells and "echo, probe" in cells and gateway_version() in cells and "live" in cells
    front_cells = browser.text_of(f"#nodes-table tr[data-node='{front['id']}']")
    assert "api" in front_cells and "every plugin" not in front_cells and "live" in front_cells
    # stress's `init`, which the node's start-up enqueued, waits already: no node here runs stress.
    waiting_before = unserved_count(served, "stress")
    assert waiting_before >= 1
    warning = "#unserved-warning [data-plugin='stress']"
    wait_for(lambda: browser.find_all(warning), 5, what="the unserved warning")

    served_job = trigger(served, "echo", message="hello")
    waiting = trigger(served, "stress", mode="ok")
    wait_for(lambda: status_of(served, served_job) == "succeeded", 30, what="the group's plugin to run")
    # Shown as it happens, no reload: the warning counts the new job too.
    said = f"stress has {waiting_before + 1} queued jobs that no live node runs"
    wait_for(lambda: browser.text_of(warning).startswith(said), 5, what="the warning to count the new job")
    assert browser.find("#unserved-warning").is_displayed()
    browser.driver.execute_script("document.getElementById('h-nodes').scrollIntoView({block: 'center'})")
    browser.screenshot("dashboard-nodes-unserved")
    assert status_of(served, waiting) == "queued"
    assert served.api.call("GET", "/healthz", token=None)[1]["plugins_unserved"] == ["stress"]
    code, doctor = ductile_json(cfg, "system", "doctor")
    assert code == 0
    (finding,) = [f["message"] for f in doctor["findings"] if f["check"] == "unserved_plugin"]
    assert finding.startswith(f"plugin 'stress' has {waiting_before + 1} queued jobs (the oldest since "), finding

    browser.open("/admin/")
    alarm = browser.find(".ductile-figure.ductile-alarm[href$='status=queued&plugin=stress']")
    assert alarm.text.split("\n") == ["1", "plugins no live node runs"]
    browser.screenshot("console-index-unserved")
    browser.open("/admin/ledger/workerinstance/")
    listed = browser.find("#result_list").text
    assert "media" in listed and "api" in listed
    browser.screenshot("console-nodes")
