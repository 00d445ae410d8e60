"""A synchronous pipeline caller that goes away gives its slot back (issue 33, item 16): with
`api.max_concurrent_sync` 1, the slot stayed taken until the gone caller's timeout, and every other
caller got 429 meanwhile. The job runs on; only the wait ends."""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.live_api import live_api
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres

TOKEN = "tok-sync"


def start_call(port: int, path: str) -> socket.socket:
    """A caller that sends its request and waits for the answer on the returned socket."""
    body = b"{}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(head.encode() + body)
    return sock


def test_a_caller_that_disconnects_frees_its_slot_for_the_next_caller_at_once(config_dir, tmp_path):
    cfg = config_dir
    cfg.extra["pipelines"] = [
        {
            "name": "long",
            "on": "long.start",
            "execution_mode": "synchronous",
            "timeout": "30s",
            "steps": [{"id": "nap", "uses": "stress", "with": {"sleep": 6, "marker_dir": str(tmp_path)}}],
        },
        {"name": "quick", "on": "quick.start", "execution_mode": "synchronous", "steps": [{"uses": "echo"}]},
    ]
    settings = {"max_concurrent_sync": 1, "max_sync_timeout": "30s"}
    tokens = [{"name": "t", "token": TOKEN, "scopes": ["*"]}]
    with live_api(cfg, tokens, workers=True, settings=settings) as live:
        api = live.api
        first = start_call(live.port, "/pipeline/long")
        wait_for(lambda: list(tmp_path.glob("*.start")), timeout=30, what="the long step to run")
        code, body = api.call("POST", "/pipeline/quick", {}, token=TOKEN)
        assert code == 429, body  # the one slot is the first caller's
        first.close()
        gone = time.monotonic()
        code, body = wait_for(
            lambda: (answer := api.call("POST", "/pipeline/quick", {}, token=TOKEN))[0] != 429 and answer,
            timeout=20,
            interval=0.05,
            what="the slot to be given back",
        )
        freed_after = time.monotonic() - gone
        assert code == 200 and body["status"] == "succeeded", body
        assert freed_after < 1.5, f"the slot came back {freed_after:.2f}s after the caller left"
        # The gone caller's job ran on to its end.
        jobs = api.call("GET", "/jobs?plugin=stress&command=handle", token=TOKEN)[1]["jobs"]
        assert len(jobs) == 1
        wait_for(
            lambda: api.call("GET", f"/job/{jobs[0]['job_id']}", token=TOKEN)[1]["status"] == "succeeded",
            timeout=30,
            what="the gone caller's job to succeed",
        )
        # A caller that stays gets its answer as before.
        answer = start_call(live.port, "/pipeline/quick")
        answer.settimeout(30)
        assert b"200 OK" in answer.recv(65536).split(b"\r\n", 1)[0]
        answer.close()
