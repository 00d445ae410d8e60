"""Loopback ports and HTTP servers a test runs on a thread."""

from __future__ import annotations

import itertools
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl


# Under xdist each worker (gw0, gw1...) takes the ports of its servers from a range of its own, below
# the kernel's ephemeral range (32768 and up on Linux), which `bind(("", 0))` and outgoing
# connections draw from: two workers never pick the same port between one's check and its
# server's bind, as two `bind(0)` checks could.
WORKER_PORTS = 1000
_next_port = itertools.count()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server a test starts."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    first = 20000 + WORKER_PORTS * int(worker.removeprefix("gw"))
    for _ in range(WORKER_PORTS):
        # In turn, not from the start each time: a port a test just used may be in TIME_WAIT.
        port = first + next(_next_port) % WORKER_PORTS
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {first}-{first + WORKER_PORTS - 1} for xdist worker {worker}")


@contextmanager
def http_server(
    handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
) -> Iterator[int]:
    """`handler` served on a loopback address (a port of its own unless `port` is given; over TLS
    with a `tls` server context), on a thread, for the test's duration: its port."""
    server = ThreadingHTTPServer((host, port), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
