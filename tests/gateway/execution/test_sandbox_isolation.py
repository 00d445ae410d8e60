"""What a plugin under each sandbox profile can reach (issue 39, docs/sandbox.md): the `intruder`
test plugin (tests/plugins/intruder) tries it for real and answers with what happened, and the
test reads that, or the job's end, as a user would. The namespaces, bubblewrap and another uid
need root (CI runs as root); without it these tests skip with the reason."""

from __future__ import annotations

import os
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from ledger.states import JobStatus
from tests.gateway.execution.test_sandbox_limits import intruder
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_response
from tests.support.network import http_server

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces, bubblewrap and setpriv need root (CI has it)"),
]


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the test"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def loopback_url() -> Iterator[str]:
    with http_server(Hello) as port:
        yield f"http://127.0.0.1:{port}/"


def did(job: Any) -> Any:
    assert job.status == JobStatus.SUCCEEDED, job.status
    return last_response(job)["result"]["did"]


def test_on_the_host_network_the_plugin_reaches_the_tests_loopback_server(
    config_dir: ConfigDir, loopback_url: str
) -> None:
    assert did(intruder(config_dir, {"try": "fetch", "url": loopback_url})) == "hello from the test"


def test_under_network_none_the_plugin_reaches_nothing_not_even_the_hosts_loopback(
    config_dir: ConfigDir, loopback_url: str
) -> None:
    job = intruder(config_dir, {"try": "fetch", "url": loopback_url}, {"network": "none"})
    assert did(job) == "refused: <urlopen error [Errno 101] Network is unreachable>"
    port = int(loopback_url.rsplit(":", 1)[1].strip("/"))
    job = intruder(config_dir, {"try": "connect", "host": "127.0.0.1", "port": port}, {"network": "none"})
    assert did(job) == "refused: [Errno 101] Network is unreachable"
    # The worker's own thread is back in the gateway's namespace: the next plugin on the host
    # profile reaches the server again.
    assert did(intruder(config_dir, {"try": "fetch", "url": loopback_url})) == "hello from the test"
