"""Every process of `system start` serves the config of the last load that succeeded, never the
files on disk (issue 33, items 5, 19 and 21; gateway/runtime.py, the supervisor's SIGHUP).

Before: a SIGHUP with a broken config left the daemons on the old one but gunicorn re-forked the
API's workers, which loaded the broken files and answered 503 on every route; a worker gunicorn
started again after a crash did the same, or served an edit nobody had reloaded while its sibling
did not; every reload stalled the API while new workers set up Django, and `/healthz` counted its
uptime from the newest worker's start."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.live_api import LiveApi, live_api
from tests.support.processes import children, descendants, ductile_json
from tests.support.waiting import wait_for

TOKENS = [{"name": "admin", "token": "tok-admin", "scopes": ["*"]}]


@pytest.fixture
def tree(process_db: ConfigDir) -> Iterator[tuple[LiveApi, ConfigDir]]:
    with live_api(process_db, TOKENS, workers=True) as live:
        yield live, process_db


def api_workers(supervisor: int) -> set[int]:
    tree = descendants(supervisor)
    masters = [pid for pid in children(supervisor) if "gunicorn" in tree.get(pid, "")]
    return {worker for master in masters for worker in children(master)}


def statuses(live: LiveApi, path: str, rounds: int = 24) -> set[int]:
    """The answers to `rounds` POSTs, over new connections (so both API processes answer some)."""
    return {live.api.call("POST", path, {"payload": {"message": "x"}})[0] for _ in range(rounds)}


def log_shows(live: LiveApi, words: str) -> bool:
    return words in live.output.text


def test_a_broken_config_reloaded_or_met_by_a_new_worker_leaves_every_process_on_the_last_good_one(tree):
    live, cfg = tree
    (cfg.path / "config.yaml").write_text("service: [this is: not valid\n")  # a half-saved edit
    live.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: log_shows(live, "the config does not load"), timeout=20, what="the refused reload in the log")
    assert statuses(live, "/plugin/echo/poll") == {202}
    assert live.api.call("GET", "/healthz", token=None)[0] == 200
    # A worker gunicorn starts again (a crash, a timeout) meets the broken files too.
    victim = min(api_workers(live.proc.pid))
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(api_workers(live.proc.pid) - {victim}) == 2, timeout=30, what="gunicorn's new worker")
    assert statuses(live, "/plugin/echo/poll") == {202}
    # And the workers still run what the API accepts.
    code, job = live.api.call("POST", "/plugin/echo/poll", {"payload": {"message": "still"}})
    assert code == 202
    wait_for(lambda: live.api.call("GET", f"/job/{job['job_id']}")[1]["status"] == "succeeded", timeout=30)


def test_an_edit_nobody_reloaded_is_served_by_no_process_until_the_reload(tree):
    live, cfg = tree
    cfg.plugins["echo-two"] = {"uses": "echo", "config": {"message": "two"}}
    cfg.write()  # valid and sealed, but not reloaded
    victims = api_workers(live.proc.pid)
    for victim in victims:  # gunicorn starts each again, as after a crash or a timeout
        os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(api_workers(live.proc.pid) - victims) == 2, timeout=30, what="gunicorn's new workers")
    wait_for(live.api.up, timeout=30, what="the new workers to serve")
    assert statuses(live, "/plugin/echo-two/poll") == {404}  # what every other process runs
    assert [r["reason"] for r in ductile_json(cfg, "config", "snapshots")[1]["snapshots"]] == ["start"]
    live.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: statuses(live, "/plugin/echo-two/poll", 8) == {202}, timeout=20, what="every process reloaded")
    # The config_snapshots fact rows: the started config, then the reloaded one, which has echo-two.
    rows = ductile_json(cfg, "config", "snapshots")[1]["snapshots"]
    assert [r["reason"] for r in rows] == ["reload", "start"]
    shown = ductile_json(cfg, "config", "snapshots", rows[0]["fingerprint"])[1]
    assert shown["content"]["plugins"]["echo-two"]["uses"] == "echo"


def test_reloads_happen_in_place_without_stalling_the_api_or_resetting_its_uptime(tree):
    live, _ = tree
    before = api_workers(live.proc.pid)
    uptime = live.api.call("GET", "/healthz", token=None)[1]["uptime_seconds"]
    took: list[float] = []
    stop = threading.Event()

    def post_meanwhile() -> None:
        while not stop.is_set():
            start = time.monotonic()
            code, _ = live.api.call("POST", "/plugin/echo/poll", {"payload": {"message": "meanwhile"}})
            took.append(time.monotonic() - start)
            assert code == 202

    poster = threading.Thread(target=post_meanwhile)
    poster.start()
    try:
        for _ in range(20):  # a burst of reloads, as a config-management run sends them
            live.proc.send_signal(signal.SIGHUP)
            time.sleep(0.1)
        time.sleep(1)
    finally:
        stop.set()
        poster.join()
    assert api_workers(live.proc.pid) == before  # the same processes: nothing re-forked
    assert max(took) < 0.5, sorted(took)[-5:]
    assert live.api.call("GET", "/healthz", token=None)[1]["uptime_seconds"] >= uptime
    # A worker started again by gunicorn reports the gateway's uptime, not its own.
    os.kill(min(before), signal.SIGKILL)
    wait_for(lambda: len(api_workers(live.proc.pid)) == 2 and api_workers(live.proc.pid) != before, timeout=30)
    seen = {live.api.call("GET", "/healthz", token=None)[1]["uptime_seconds"] for _ in range(12)}
    assert min(seen) >= uptime, (uptime, seen)
