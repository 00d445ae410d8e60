"""An open `GET /events` stream does not hold up a stopping API: `system start` (gunicorn serving
the API) with a real HTTP client holding a stream open. SIGTERM stops everything in a few seconds
(gunicorn would otherwise wait its 30 s graceful_timeout for the stream), and the client sees the
stream end cleanly: a last comment, then the chunked terminator. A SIGHUP reload leaves them open."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import time

import pytest

from tests.support.live_api import live_api
from tests.support.processes import ductile

pytestmark = pytest.mark.postgres

TOKEN = "tok-events"


@pytest.fixture
def api_only(process_db):
    scopes = ["events:ro", "plugin:ro", "jobs:ro"]
    with live_api(process_db, [{"name": "events", "token": TOKEN, "scopes": scopes}]) as live:
        yield live.api, live.proc, process_db, live.port


def open_stream(port: int, **headers: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request("GET", "/events", headers={"Authorization": f"Bearer {TOKEN}", **headers})
    response = conn.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/event-stream")
    assert response.readline() == b": stream open\n"  # the stream is live on the server
    return response


def test_sigterm_ends_open_streams_and_the_api_exits_well_within_the_graceful_timeout(api_only):
    _, proc, _, port = api_only
    streams = [open_stream(port) for _ in range(3)]
    # Requests still arriving do not hold the stop up for their 10 s deadline either.
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
    for sock in slow:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
    stopping = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    # read() raises IncompleteRead if the connection drops before the chunked terminator: a stream
    # that held gunicorn up until its graceful_timeout would have been cut by the SIGKILL, not
    # ended by the server with its last comment.
    rests = [stream.read() for stream in streams]
    proc.wait(timeout=60)
    assert time.monotonic() - stopping < 8
    for sock in slow:
        sock.close()
    for rest in rests:
        assert rest.endswith(b": server stopping\n\n")
    assert proc.returncode == 0
    output = proc.stdout.read() if proc.stdout else ""
    assert "Traceback" not in output


def test_a_reload_keeps_open_streams_open(api_only):
    """The API's workers reload in place (ductile_site/gunicorn.py): a stream open across a
    SIGHUP carries on, and hears of what happens after it. (A reload that re-forked the workers
    used to end every stream, and the client had to reconnect.)"""
    _, proc, cfg, port = api_only
    stream = open_stream(port)
    proc.send_signal(signal.SIGHUP)
    time.sleep(1)  # the reload is done: the workers read the snapshot in milliseconds
    run = ductile(cfg, "plugin", "run", "echo", "--payload", '{"message": "after the reload"}')
    assert run.returncode == 0, run.stderr
    while True:  # every read has the connection's 20 s timeout
        line = stream.readline().decode()
        assert line, "the stream ended"
        if line.startswith("data: ") and json.loads(line.removeprefix("data: "))["type"] == "echo.poll":
            break
    assert json.loads(line.removeprefix("data: "))["payload"]["message"] == "after the reload"
    stream.close()
