"""Failed API authentication in-process (DRF test client, real config): each bad, malformed or
missing bearer token on a protected route counted per client address, logged at once for a new
address and then once per interval with the count, never a line per request; the host's tally
that `system status` reads; and a valid token leaves no trace."""

from __future__ import annotations

import io
import json
import logging
import threading

import pytest
from rest_framework.test import APIClient

from gateway.http.api import auth
from gateway.http.refusals import API_AUTHENTICATION, OTHERS, Refusals, read_tally
from gateway.logs import JsonFormatter
from tests.support.runtime import installed_runtime
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def api(config_dir):
    config_dir.extra["api"] = {
        "enabled": True,
        "auth": {"tokens": [{"name": "admin", "token": "tok", "scopes": ["*"]}]},
    }
    with installed_runtime(config_dir) as holder:
        yield APIClient(), API_AUTHENTICATION.tally_path(holder.get().config.state_path)


@pytest.fixture
def refusals(monkeypatch):
    """The API's counter, its own as a fresh worker's. Its interval's end is `flush()`, called by
    the test: a timer's, on a shared CPU, could fall in the middle of a flood."""
    counter = Refusals(API_AUTHENTICATION, interval=3600)
    monkeypatch.setattr(auth, "REFUSALS", counter)
    return counter


@pytest.fixture
def log_lines():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    api_log = logging.getLogger("ductile.api")
    api_log.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    api_log.removeHandler(handler)


def refusal_lines(lines):
    return [line for line in lines if "failed API authentication" in line["message"]]


def test_a_flood_of_bad_tokens_is_counted_in_a_line_per_address_per_interval(api, refusals, log_lines):
    client, tally = api
    for _ in range(300):
        assert client.get("/jobs", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    for _ in range(50):
        assert client.get("/jobs").status_code == 401  # missing on a protected route
    for _ in range(10):
        answer = client.get("/jobs", HTTP_AUTHORIZATION="Basic abc", REMOTE_ADDR="192.0.2.7")
        assert answer.status_code == 401
    # Each address's first failure at once, nothing more yet.
    first = refusal_lines(log_lines())
    assert [(line["client_ip"], line["failures"]) for line in first] == [("127.0.0.1", 1), ("192.0.2.7", 1)]
    assert first[0]["level"] == "WARNING" and first[0]["component"] == "api"
    assert "invalid token (/jobs)" in first[0]["message"]
    assert "malformed Authorization header" in first[1]["message"]
    # At the interval's end, one line per address with the count since.
    refusals.flush()
    later = refusal_lines(log_lines())[2:]
    assert len(later) == 2
    assert {line["client_ip"]: line["failures"] for line in later} == {"127.0.0.1": 349, "192.0.2.7": 9}
    assert "invalid token: 299, missing bearer token: 50" in later[0]["message"]
    # The host's tally: every failure, by address.
    kept = read_tally(tally)
    assert kept["failures"] == 360 and kept["since"] <= kept["last_at"]
    assert {s: v["failures"] for s, v in kept["sources"].items()} == {"127.0.0.1": 350, "192.0.2.7": 10}
    assert kept["sources"]["192.0.2.7"]["last_reason"].startswith("malformed Authorization header")
    assert tally.stat().st_mode & 0o777 == 0o600
    # A quiet interval later an address's next failure is said at once again; the tally adds up.
    refusals.flush()
    assert len(refusal_lines(log_lines())) == 4
    client.get("/jobs", HTTP_AUTHORIZATION="Bearer wrong")
    assert refusal_lines(log_lines())[-1]["failures"] == 1
    refusals.flush()
    assert read_tally(tally)["failures"] == 361


def test_the_interval_ends_by_itself(api, monkeypatch, log_lines):
    client, tally = api
    monkeypatch.setattr(auth, "REFUSALS", Refusals(API_AUTHENTICATION, interval=0.2))
    for _ in range(3):
        client.get("/jobs", HTTP_AUTHORIZATION="Bearer wrong")
    wait_for(lambda: tally.exists() and read_tally(tally)["failures"] == 3, timeout=10, what="the tally")
    wait_for(lambda: auth.REFUSALS._timer is None, timeout=10, what="the counter to go quiet")
    assert sum(line["failures"] for line in refusal_lines(log_lines())) == 3


def test_a_valid_token_and_an_open_route_leave_no_trace(api, refusals, log_lines):
    client, tally = api
    assert client.get("/jobs", HTTP_AUTHORIZATION="Bearer tok").status_code == 200
    assert client.get("/healthz").status_code == 200
    refusals.flush()
    assert not refusal_lines(log_lines()) and not tally.exists()
    assert read_tally(tally) == {"failures": 0, "since": None, "last_at": None, "sources": {}}


def test_past_the_tracked_addresses_failures_are_counted_together(tmp_path, log_lines):
    counter = Refusals(API_AUTHENTICATION, lambda: tmp_path / "tally.json", interval=60, max_sources=3)

    def fail_five_times(address: str) -> None:
        for _ in range(5):
            counter.record(address, "invalid token", "/jobs")

    threads = [threading.Thread(target=fail_five_times, args=(f"198.51.100.{n}",)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counter.flush()
    lines = refusal_lines(log_lines())
    addresses = {line["client_ip"] for line in lines}
    assert len(addresses) == 4 and OTHERS in addresses  # 3 addresses tracked, the rest together
    assert len(lines) <= 2 * 4
    assert sum(line["failures"] for line in lines) == 50
    assert read_tally(tmp_path / "tally.json")["failures"] == 50
