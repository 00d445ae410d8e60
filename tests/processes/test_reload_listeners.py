"""A reload that adds, moves or drops a listener is carried out by `system start` without a
restart (issue 35, new-8): before, a webhooks.yaml added and reloaded was never served (the
listener's port refused connections until a restart, and the reload's answer said nothing). The
answer names what changes; /healthz names the command the gateway runs as (item 132)."""

from __future__ import annotations

import json
import urllib.request

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.live_api import live_api
from tests.support.network import free_port
from tests.support.waiting import wait_for
from tests.support.webhooks import ENV, WEBHOOKS, write_config

TOKENS = [{"name": "admin", "token": "tok-admin", "scopes": ["*"]}]


def serves(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_a_reload_starts_moves_and_stops_the_webhook_listener(process_db: ConfigDir, monkeypatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    with live_api(process_db, TOKENS) as live:
        health = live.api.call("GET", "/healthz", token=None)[1]
        assert health["binary_path"] == str(REPO / "manage.py")  # what this test started the gateway as

        first = free_port()
        write_config(process_db, WEBHOOKS, listen=f"127.0.0.1:{first}")
        code, body = live.api.call("POST", "/system/reload")
        assert code == 200, body
        assert body["listeners"] == [f"the webhook listener starts on 127.0.0.1:{first}"], body
        assert body["message"].endswith(f"The webhook listener starts on 127.0.0.1:{first}."), body
        wait_for(lambda: serves(first), timeout=30, what="the added webhook listener", explain=lambda: live.output.text)

        second = free_port()
        process_db.extra["webhooks"] = {"listen": f"127.0.0.1:{second}"}
        process_db.write()
        code, body = live.api.call("POST", "/system/reload")
        assert body["listeners"] == [f"the webhook listener moves from 127.0.0.1:{first} to 127.0.0.1:{second}"]
        wait_for(lambda: serves(second) and not serves(first), timeout=30, what="the listener on its new port")
        # The listener started seconds ago reports the gateway's uptime, as the API does (re-audit
        # N7: it reported its own process's, 22 s beside the API's 518 s).
        with urllib.request.urlopen(f"http://127.0.0.1:{second}/healthz", timeout=2) as response:
            listener_uptime = json.load(response)["uptime_seconds"]
        api_uptime = live.api.call("GET", "/healthz", token=None)[1]["uptime_seconds"]
        assert abs(listener_uptime - api_uptime) <= 1 and api_uptime >= 2, (listener_uptime, api_uptime)

        del process_db.extra["webhooks"]
        process_db.extra["include"] = ["tokens.yaml"]
        process_db.write()
        code, body = live.api.call("POST", "/system/reload")
        assert body["listeners"] == [f"the webhook listener on 127.0.0.1:{second} stops"], body
        wait_for(lambda: not serves(second), timeout=30, what="the dropped listener to stop")
        assert live.api.up()  # the API itself served on throughout
        assert "webhooks exited" not in live.output.text  # a stop the reload asked for is no death
