"""2,000 bad bearer tokens against a running gateway (`system start`, gunicorn's workers): the
log gets a few lines, not 2,000, and `system status` counts every one, by address."""

from __future__ import annotations

import http.client
import json
import threading

from tests.support.config_dirs import ConfigDir
from tests.support.live_api import live_api
from tests.support.processes import ductile, ductile_json

FLOOD, CONNECTIONS = 2000, 4


def flood(port: int, count: int) -> list[int]:
    """`count` GET /jobs with a wrong token on one keep-alive connection: their statuses."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    statuses = []
    for _ in range(count):
        connection.request("GET", "/jobs", headers={"Authorization": "Bearer not-a-token"})
        response = connection.getresponse()
        response.read()
        statuses.append(response.status)
    connection.close()
    return statuses


def test_a_flood_of_bad_tokens_is_a_few_log_lines_and_a_count_in_system_status(tmp_path):
    cfg = ConfigDir(tmp_path / "config")
    statuses: list[int] = []
    with live_api(cfg, [{"name": "admin", "token": "tok-admin", "scopes": ["*"]}]) as live:
        threads = [
            threading.Thread(target=lambda: statuses.extend(flood(live.port, FLOOD // CONNECTIONS)))
            for _ in range(CONNECTIONS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert statuses == [401] * FLOOD
    # Stopped: each worker wrote what it had counted as it exited.
    lines = [json.loads(line) for line in live.output.text.splitlines() if "failed API authentication" in line]
    workers = 2  # DUCTILE_API_PROCESSES' default
    assert 1 <= len(lines) <= 2 * workers, lines  # each worker: the first at once, the rest in one line
    assert sum(line["failures"] for line in lines) == FLOOD
    assert {line["client_ip"] for line in lines} == {"127.0.0.1"}
    code, status = ductile_json(cfg, "system", "status")
    assert code == 0, status
    tally = status["api_auth_failures"]
    assert tally["failures"] == FLOOD and tally["sources"]["127.0.0.1"]["failures"] == FLOOD
    assert tally["sources"]["127.0.0.1"]["last_reason"] == "invalid token"
    text = ductile(cfg, "system", "status").stdout
    assert f"failed API authentications: {FLOOD:,} since " in text and "last from 127.0.0.1" in text
