"""An open `GET /events` stream does not hold up a stopping API: `system start` (gunicorn serving
the API) with a real HTTP client holding a stream open. SIGTERM stops everything in a few seconds
(gunicorn would otherwise wait its 30 s graceful_timeout for the stream), and the client sees the
stream end cleanly: a last comment, then the chunked terminator. A SIGHUP reload ends streams the
same way (the old workers stop), and the client resumes from its Last-Event-ID on a new worker."""

from __future__ import annotations

import http.client
import json
import signal

import pytest

from tests.support import ductile, wait_for
from tests.support.live_api import live_api

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

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
    proc.send_signal(signal.SIGTERM)
    # read() raises IncompleteRead if the connection drops before the chunked terminator: a stream
    # that held gunicorn up until its graceful_timeout would have been cut by the SIGKILL, not
    # ended by the server with its last comment.
    rests = [stream.read() for stream in streams]
    proc.wait(timeout=60)
    for rest in rests:
        assert rest.endswith(b": server stopping\n\n")
    assert proc.returncode == 0
    output = proc.stdout.read() if proc.stdout else ""
    assert "Traceback" not in output


def test_a_reload_ends_streams_and_the_client_resumes_from_its_last_event_id(api_only):
    _, proc, cfg, port = api_only
    stream = open_stream(port)
    proc.send_signal(signal.SIGHUP)  # gunicorn starts new workers and stops the old ones
    rest = stream.read().decode()
    assert rest.endswith(": server stopping\n\n")  # ended by the old worker, not cut at its timeout
    last_id = [line for line in ("id: 0\n" + rest).splitlines() if line.startswith("id: ")][-1].split(": ")[1]
    # Events written while no stream was open are delivered on the reconnect, after last_id.
    run = ductile(cfg, "plugin", "run", "echo", "--payload", '{"message": "between"}')
    assert run.returncode == 0, run.stderr
    resumed = wait_for(lambda: _reconnect(port, last_id), timeout=30, what="a new worker to serve /events")
    types = []
    while "echo.poll" not in types:  # every read has the connection's 20 s timeout
        line = resumed.readline().decode()
        assert line, "the resumed stream ended"
        if line.startswith("data: "):
            event = json.loads(line.removeprefix("data: "))
            assert event["id"] > int(last_id)
            types.append(event["type"])
    assert event["payload"]["message"] == "between"
    resumed.close()


def _reconnect(port: int, last_id: str) -> http.client.HTTPResponse | None:
    try:
        return open_stream(port, **{"Last-Event-ID": last_id})
    except (OSError, AssertionError, http.client.HTTPException):
        return None
