"""Slow, idle and streaming clients against the real API (`system start`: gunicorn with the front
door, gateway/http/frontdoor.py, two processes of 16 threads). Before it, 40 connections that sent
one byte each held every thread, and `/healthz` and job POSTs timed out for as long as they stayed
open; 20 open `/events` streams did the same (issue 33, items 1 and 2).

One gateway serves the whole module, with small caps so they can be reached: 48 connections per
process (so a few hundred slow clients overflow it), and 24 streams in all, 16 per token."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.live_api import LiveApi, live_api
from tests.support.processes import ductile
from tests.support.waiting import wait_for

TOKENS = [{"name": name, "token": f"tok-{name}", "scopes": ["*"]} for name in ("ada", "bob", "cyd")]
CONNECTIONS_PER_PROCESS = 48
MAX_STREAMS, PER_TOKEN = 24, 16
HEAD_SECONDS = 10.0  # gateway.http.frontdoor.HEAD_SECONDS


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    cfg = ConfigDir(tmp_path_factory.mktemp("frontdoor") / "config")
    settings = {"max_streams": MAX_STREAMS, "max_streams_per_token": PER_TOKEN}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DUCTILE_API_CONNECTIONS", str(CONNECTIONS_PER_PROCESS))
        with live_api(cfg, TOKENS, settings=settings) as live:
            live.config = cfg  # type: ignore[attr-defined]
            yield live


def gateway_config(live: LiveApi) -> ConfigDir:
    return live.config  # type: ignore[attr-defined]


def request(port: int, method: str, path: str, body: bytes | None = None, token: str = "tok-ada") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def probe(port: int, rounds: int = 20) -> list[float]:
    """`/healthz` and a job POST, alternately; each must answer 200/202, and how long each took."""
    took = []
    for n in range(rounds):
        start = time.monotonic()
        if n % 2:
            code, _ = request(port, "GET", "/healthz")
            assert code == 200
        else:
            code, body = request(port, "POST", "/plugin/echo/poll", json.dumps({"payload": {"n": n}}).encode())
            assert code == 202, body
        took.append(time.monotonic() - start)
    return took


def connect(port: int, first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if first:
        sock.sendall(first)
    return sock


def answer(sock: socket.socket, timeout: float = 5) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


BURST = """
import socket, sys, time
held = []
for _ in range(150):
    held.append(socket.create_connection(("127.0.0.1", int(sys.argv[1]))))
    held[-1].sendall(b"G")
time.sleep(2)
"""


def test_slow_and_idle_clients_hold_no_thread_and_are_closed_at_their_deadline(gateway):
    port = gateway.port
    opened = time.monotonic()
    # More than every thread of both processes (32), and more than both processes' connections
    # (96): one byte each, a head cut short, and nothing at all.
    slow = [connect(port, b"G") for _ in range(60)]
    slow += [connect(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n") for _ in range(60)]
    slow += [connect(port) for _ in range(60)]
    # And more arriving while the probes run (from another process, as an attacker's would: a
    # thread of this one would hold the GIL between a probe's connect and its send): a probe must
    # not be the one closed to make room.
    burst = subprocess.Popen([sys.executable, "-c", BURST, str(port)])
    took = probe(port)
    burst.wait(timeout=30)
    assert max(took) < 1.0, took
    # A head not whole within HEAD_SECONDS is answered 408 and closed; one that never started, closed.
    # (The oldest were already closed to make room for the newer ones and the probes.)
    answers = [answer(sock, timeout=HEAD_SECONDS + 5) for sock in slow]
    assert time.monotonic() - opened < HEAD_SECONDS + 6
    assert {a.split(b"\r\n", 1)[0] for a in answers if a} == {b"HTTP/1.1 408 Request Timeout"}
    assert all(a == b"" for a in answers[120:])  # no request begun: closed without an answer
    for sock in slow:
        sock.close()


def test_a_body_trickling_in_holds_no_thread(gateway):
    port = gateway.port
    head = b"POST /plugin/echo/poll HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-ada\r\n"
    head += b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    trickling = [connect(port, head) for _ in range(40)]
    assert max(probe(port, rounds=6)) < 1.0
    for sock in trickling:
        sock.close()


def test_an_oversized_head_is_refused_with_431(gateway):
    sock = connect(port := gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 70_000)
    assert answer(sock).startswith(b"HTTP/1.1 431 ")
    assert request(port, "GET", "/healthz")[0] == 200


def test_expect_100_continue_is_answered_once_before_the_body(gateway):
    body = json.dumps({"payload": {"message": "after 100"}}).encode()
    sock = connect(gateway.port)
    sock.sendall(
        b"POST /plugin/echo/poll HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-ada\r\n"
        b"Content-Type: application/json\r\nExpect: 100-continue\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    sock.settimeout(0.5)  # curl waits 1 s for it before sending the body anyway: it must come sooner
    assert sock.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.sendall(body)
    rest = answer(sock)
    assert rest.startswith(b"HTTP/1.1 202 ") and b"100 Continue" not in rest


def test_chunked_and_pipelined_requests_are_served(gateway):
    payload = json.dumps({"payload": {"message": "chunked"}}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (payload[:7], payload[7:])) + b"0\r\n\r\n"
    sock = connect(gateway.port)
    sock.sendall(
        b"POST /plugin/echo/poll HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-ada\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked
        # A second request in the same packet, after the first's body: it must not be lost.
        + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    both = answer(sock)
    assert both.startswith(b"HTTP/1.1 202 ")
    assert both.count(b"HTTP/1.1 200 OK") == 1 and b'"status":"ok"' in both


def open_stream(port: int, token: str) -> tuple[int, socket.socket]:
    sock = connect(port, f"GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    sock.settimeout(5)
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    return int(head.split(b" ", 2)[1]), sock


def read_until(sock: socket.socket, marker: bytes, timeout: float = 10) -> bytes:
    deadline, data = time.monotonic() + timeout, b""
    while marker not in data and time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data += sock.recv(65536)
        except TimeoutError:
            break
    return data


def test_streams_hold_no_thread_and_are_capped_per_token_and_in_all(gateway):
    port = gateway.port
    # More streams than both processes have threads: each was a thread, and 20 took the API down.
    ada = [open_stream(port, "tok-ada") for _ in range(PER_TOKEN)]
    bob = [open_stream(port, "tok-bob") for _ in range(MAX_STREAMS - PER_TOKEN)]
    assert {code for code, _ in ada + bob} == {200}
    assert max(probe(port)) < 1.0
    # Every open stream hears of a job that finished (the hub serves them all).
    run = ductile(gateway_config(gateway), "plugin", "run", "echo", "--payload", '{"message": "door"}')
    assert run.returncode == 0, run.stderr
    for _, sock in ada + bob:
        assert b'"message":"door"' in read_until(sock, b'"message":"door"')
    # Past the token's share: 429; past the server's: 503 (each with Retry-After).
    assert open_stream(port, "tok-ada")[0] == 429
    assert open_stream(port, "tok-cyd")[0] == 503
    # A client that goes away gives its seat back.
    ada.pop()[1].close()
    wait_for(lambda: open_stream(port, "tok-cyd")[0] == 200, timeout=5, what="the seat to be given back")
    for _, sock in ada + bob:
        sock.close()


def test_malformed_requests_are_logged_as_json_lines_at_a_bounded_rate(gateway):
    """gunicorn wrote one WARNING of its own format per malformed request (3,000 in 0.9 s: 345 KB
    of lines that are not JSON). Now every line is JSON and the client's noise is throttled."""
    port = gateway.port
    before = len(gateway.output.text.splitlines())
    for n in range(300):
        sock = connect(port, b"GET /\x1b[2J HTTP/9.9\r\nHost: x\r\n\r\n" if n % 2 else b"BAD LINE\r\n\r\n")
        assert answer(sock).startswith(b"HTTP/1.1 400 ")
        sock.close()
    assert request(port, "GET", "/healthz")[0] == 200
    time.sleep(0.5)
    lines = gateway.output.text.splitlines()[before:]
    records = [json.loads(line) for line in lines]  # every line is JSON
    noise = [r for r in records if r["message"].startswith("Invalid request")]
    assert 1 <= len(noise) <= 4, noise  # the first of each process, and perhaps one 10 s later
    assert all(r["component"] == "http" and r["level"] == "WARNING" for r in noise)
    assert "\x1b" not in "\n".join(lines)  # the client's escape codes stay escaped in the JSON
