"""The bundled `fetch` plugin (issue 34), run through the runtime as real processes against
loopback servers the tests start: each output format, its events, the egress policy
(allowed_hosts, the address blocklist, DNS pinned between the check and the connect, redirects
checked at every hop), the body cap, the timeouts and its stopwatch sub-spans.

Loopback is refused by default, so these tests allow 127.0.0.1 explicitly; the blocklist tests
say which addresses are refused without it."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from gateway.plugins.environment import plugin_environment
from ledger.models import Job, JobStopwatch
from ledger.states import JobStatus
from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_response, run_job
from tests.support.network import free_port, http_server
from tests.support.processes import ductile, ductile_json
from tests.support.runtime import installed_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = pytest.mark.django_db(transaction=True)

ENTRYPOINT = REPO / "plugins" / "fetch" / "run.py"
PAGE = (
    b"<html><head><title>Title</title><script>track()</script></head>"
    b"<body><h1>Hello</h1><p>Some <b>bold</b> text.</p><ul><li>one</li><li>two</li></ul></body></html>"
)

Answer = Callable[[BaseHTTPRequestHandler], None]


def page(body: bytes = PAGE, content_type: str = "text/html; charset=utf-8", **headers: str) -> Answer:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    return answer


def redirect(location: str, status: int = 302) -> Answer:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return answer


class Site:
    """A loopback web server answering each path as `pages` says (404 otherwise), recording every
    connection it accepts and every request it reads."""

    def __init__(self, pages: dict[str, Answer]):
        self.pages = pages
        self.connections = 0
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.port = 0

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                site.connections += 1
                super().setup()

            def do_GET(self) -> None:
                site.requests.append((self.path, dict(self.headers)))
                if self.path in site.pages:
                    site.pages[self.path](self)
                else:
                    self.send_error(404)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@contextmanager
def serve(pages: dict[str, Answer], host: str = "127.0.0.1", port: int = 0, **kw: Any) -> Iterator[Site]:
    site = Site(pages)
    with http_server(site.handler(), host, port, **kw) as bound:
        site.port = bound
        yield site


def fetch_job(config_dir: ConfigDir, url: str, *, routes: list[dict[str, str]] | None = None, **config: Any) -> Job:
    """One `handle` of fetch with `config`, through the runtime. allowed_hosts is 127.0.0.1 unless
    given (None: not set at all, the default policy)."""
    config.setdefault("allowed_hosts", ["127.0.0.1"])
    config_dir.plugins["fetch"] = {
        "config": {key: value for key, value in config.items() if value is not None},
        "retry": {"max_attempts": 1},
    }
    config_dir.routes = routes or []
    with installed_runtime(config_dir) as runtime:
        return run_job(runtime, "fetch", command="handle", payload={"url": url})


def completed(job: Job) -> dict[str, Any]:
    response = last_response(job)
    assert job.status == JobStatus.SUCCEEDED, response
    (event,) = response["events"]
    assert event["type"] == "fetch.completed"
    return dict(event["payload"])


def failed(job: Job) -> tuple[str, bool, dict[str, Any]]:
    """A failed fetch: its error, whether it may be retried, and its fetch.failed payload."""
    response = last_response(job)
    assert job.status in (JobStatus.FAILED, JobStatus.DEAD) and response["status"] == "error", response
    (event,) = response["events"]
    assert event["type"] == "fetch.failed"
    assert job.last_error == response["error"]
    return response["error"], response["retry"], event["payload"]


def run_directly(request: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """The plugin as the gateway spawns it (its entrypoint, the plugin environment), without a job."""
    proc = subprocess.run(
        [str(ENTRYPOINT)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=plugin_environment() if env is None else env,
        timeout=30,
    )
    assert proc.stdout, proc.stderr
    return dict(json.loads(proc.stdout))


# -- the normal path -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output_format", "content"),
    [
        ("html", PAGE.decode()),
        # The text a reader sees: no title, no script, one string a line (the original's text).
        ("text", "Hello\nSome\nbold\ntext.\none\ntwo"),
        ("markdown", "# Hello\n\nSome **bold** text.\n\n* one\n* two"),
    ],
)
def test_each_output_format_is_emitted_as_fetch_completed(config_dir, output_format, content):
    with serve({"/page": page()}) as site:
        job = fetch_job(config_dir, site.url("/page"), output_format=output_format)
    assert completed(job) == {
        "url": site.url("/page"),
        "final_url": site.url("/page"),
        "status_code": 200,
        "content_length": len(content),
        "output_format": output_format,
        "content": content,
    }
    assert last_response(job)["result"] == f"fetched {site.url('/page')} ({len(content)} chars, format={output_format})"
    ((_, headers),) = site.requests
    assert headers["Host"] == f"127.0.0.1:{site.port}" and headers["User-Agent"] == "ductile-fetch/1.0"
    # markdown asks the server for markdown first (content negotiation, as the original).
    assert headers.get("Accept") == ("text/markdown, text/html" if output_format == "markdown" else None)


def test_markdown_a_server_sends_is_passed_on_with_its_token_count(config_dir):
    body = "# Already markdown\n\n_kept_ as sent\n"
    served = page(body.encode(), "text/markdown; charset=utf-8", **{"x-markdown-tokens": "7"})
    with serve({"/md": served, "/bad": page(b"<p>x</p>", **{"x-markdown-tokens": "many"})}) as site:
        job = fetch_job(config_dir, site.url("/md"), output_format="markdown", user_agent="agent/2")
        bad = fetch_job(config_dir, site.url("/bad"))
    payload = completed(job)
    assert (payload["content"], payload["output_format"], payload["markdown_tokens"]) == (body, "markdown", 7)
    assert site.requests[0][1]["User-Agent"] == "agent/2"
    # A header the server controls cannot crash the plugin: a bounded, reported failure.
    error, retry, event = failed(bad)
    assert error == f"invalid x-markdown-tokens header from {site.url('/bad')}: 'many'" and retry is False
    assert event == {"url": site.url("/bad"), "error": "invalid x-markdown-tokens header"}


def test_fetch_completed_is_routed_with_its_payload_and_no_dedupe_key(config_dir):
    with serve({"/": page()}) as site:
        routes = [{"from": "fetch", "event_type": "fetch.completed", "to": "echo"}]
        job = fetch_job(config_dir, site.url(), routes=routes, output_format="text")
    (child,) = Job.objects.filter(parent_job_id=job.id)
    assert (child.plugin, child.command, child.status) == ("echo", "handle", JobStatus.SUCCEEDED)
    assert child.payload is not None and child.event is not None
    assert {k: child.payload[k] for k in ("url", "final_url", "status_code", "output_format")} == {
        "url": site.url(),
        "final_url": site.url(),
        "status_code": 200,
        "output_format": "text",
    }
    # The original's events carry no dedupe key, so neither do the jobs they start.
    assert child.event["type"] == "fetch.completed" and child.dedupe_key is None


def test_the_stopwatch_records_dns_connect_first_byte_body_and_conversion(config_dir):
    with serve({"/": page()}) as site:
        job = fetch_job(config_dir, site.url(), output_format="markdown")
        refused = fetch_job(config_dir, f"http://127.0.0.1:{free_port()}/")
    subs = JobStopwatch.objects.get(job_id=job.id).subs_json
    assert [s["name"] for s in subs] == [
        "fetch.dns",
        "fetch.connect",
        "fetch.first_byte",
        "fetch.body_read",
        "fetch.convert",
    ]
    assert all(isinstance(s["dur_ns"], int) and s["dur_ns"] > 0 and s["status"] == "ok" for s in subs)
    assert subs[3]["bytes"] == len(PAGE)
    # A failed phase is recorded too, marked err, and nothing after it.
    subs = JobStopwatch.objects.get(job_id=refused.id).subs_json
    assert [(s["name"], s["status"]) for s in subs] == [("fetch.dns", "ok"), ("fetch.connect", "err")]


def test_redirects_are_followed_when_asked_and_each_hop_counted_once_in_the_stopwatch(config_dir):
    pages = {"/start": redirect("/middle"), "/middle": redirect("/end", 301), "/end": page()}
    with serve(pages) as site:
        job = fetch_job(config_dir, site.url("/start"), follow_redirects=True)
        refused = fetch_job(config_dir, site.url("/start"))
    payload = completed(job)
    assert (payload["url"], payload["final_url"]) == (site.url("/start"), site.url("/end"))
    assert site.paths == ["/start", "/middle", "/end", "/start"]
    subs = {s["name"]: s for s in JobStopwatch.objects.get(job_id=job.id).subs_json}
    assert subs["fetch.connect"]["count"] == 3 and "count" not in subs["fetch.body_read"]
    # Not followed by default (the original's follow_redirects: false).
    error, retry, event = failed(refused)
    assert error == "egress rejected: redirect refused: HTTP 302 to /middle (follow_redirects=false)"
    assert retry is False and event == {"url": site.url("/start"), "error": error.removeprefix("egress rejected: ")}


# -- the egress policy -----------------------------------------------------------------------


def test_a_host_outside_allowed_hosts_is_never_contacted(config_dir):
    with serve({"/": page()}) as site:
        job = fetch_job(config_dir, site.url(), allowed_hosts=["example.com"])
        denied = fetch_job(config_dir, site.url(), allowed_hosts=["127.0.0.1"], denied_hosts=["127.0.0.1"])
    error, retry, event = failed(job)
    assert error == "egress rejected: host '127.0.0.1' not in allowed_hosts" and retry is False
    assert event == {"url": site.url(), "error": "host '127.0.0.1' not in allowed_hosts"}
    assert failed(denied)[0] == "egress rejected: host '127.0.0.1' is in denied_hosts"
    assert site.connections == 0


def test_loopback_is_refused_by_default_and_allowed_when_listed(config_dir):
    with serve({"/": page()}) as site:
        for host in ("127.0.0.1", "localhost"):
            error, retry, _ = failed(fetch_job(config_dir, site.url(host=host), allowed_hosts=None))
            # localhost may resolve to ::1 first: every address it resolves to is checked.
            assert error in (
                "egress rejected: address 127.0.0.1 is loopback",
                "egress rejected: address ::1 is loopback",
            )
            assert retry is False
        assert site.connections == 0
        completed(fetch_job(config_dir, site.url(host="localhost"), allowed_hosts=["LOCALHOST"]))
    assert site.connections == 1


# Refused before any connection, whatever the address's form (the original's words).
REFUSED = {
    "http://[::1]/": "address ::1 is loopback",
    "http://[::ffff:127.0.0.1]/": "address 127.0.0.1 is loopback",
    "http://2130706433/": "address 127.0.0.1 is loopback",  # 127.0.0.1 as one number
    "http://0.0.0.0/": "address 0.0.0.0 is unspecified (0.0.0.0 / ::)",
    "http://10.1.2.3/": "address 10.1.2.3 is private (RFC1918 / ULA)",
    "http://172.16.0.1/": "address 172.16.0.1 is private (RFC1918 / ULA)",
    "http://192.168.1.1/": "address 192.168.1.1 is private (RFC1918 / ULA)",
    "http://[fd00::1]/": "address fd00::1 is private (RFC1918 / ULA)",
    "http://169.254.169.254/latest/meta-data/": "address 169.254.169.254 is a cloud metadata endpoint",
    "http://[fd00:ec2::254]/": "address fd00:ec2::254 is a cloud metadata endpoint",
    "http://100.100.100.200/": "address 100.100.100.200 is a cloud metadata endpoint",
    "http://169.254.1.1/": "address 169.254.1.1 is link-local",
    "http://[fe80::1]/": "address fe80::1 is link-local",
    "http://100.64.0.1/": "address 100.64.0.1 is shared address space (CGNAT, RFC 6598)",
    "http://224.0.0.1/": "address 224.0.0.1 is multicast",
    "http://[ff02::1]/": "address ff02::1 is multicast",
    "http://240.0.0.1/": "address 240.0.0.1 is reserved",
    "http://192.0.2.1/": "address 192.0.2.1 is not globally routable (special-purpose range)",
    "http://[64:ff9b::a00:1]/": "address 10.0.0.1 is private (RFC1918 / ULA) (embedded in 64:ff9b::a00:1)",
    "http://[2002:7f00:1::]/": "address 127.0.0.1 is loopback (embedded in 2002:7f00:1::)",
    "file:///etc/passwd": "scheme 'file' not in {http, https}: file:///etc/passwd",
    "http:///nohost": "missing hostname: http:///nohost",
}


@pytest.mark.process
def test_the_blocklist_refuses_internal_addresses_before_connecting():
    # The policy decides before any connection, so these run the plugin without a job or a
    # server, side by side.
    def refuse(url: str) -> tuple[str, bool, list[str]]:
        response = run_directly({"command": "handle", "config": {}, "event": {"payload": {"url": url}}})
        return response["error"], response["retry"], [s["name"] for s in response.get("ductile_stopwatch_subs", [])]

    with ThreadPoolExecutor(4) as pool:
        refused = dict(zip(REFUSED, pool.map(refuse, REFUSED), strict=True))
    assert {url: error for url, (error, _, _) in refused.items()} == {
        url: f"egress rejected: {reason}" for url, reason in REFUSED.items()
    }
    assert {retry for _, retry, _ in refused.values()} == {False}
    # Nothing past the DNS lookup (none at all for a URL refused by its form).
    assert {tuple(spans) for _, _, spans in refused.values()} == {("fetch.dns",), ()}


def test_a_redirect_to_a_refused_host_is_refused_at_the_hop(config_dir):
    with serve({"/": page()}) as elsewhere:
        pages = {
            "/to-localhost": redirect(elsewhere.url(host="localhost")),
            "/to-file": redirect("file:///etc/passwd"),
        }
        with serve(pages) as site:
            job = fetch_job(config_dir, site.url("/to-localhost"), follow_redirects="true")
            scheme = fetch_job(config_dir, site.url("/to-file"), follow_redirects="true")
    error, retry, event = failed(job)
    assert error == "egress rejected: host 'localhost' not in allowed_hosts" and retry is False
    assert event["url"] == site.url("/to-localhost")
    assert failed(scheme)[0] == "egress rejected: scheme 'file' not in {http, https}: file:///etc/passwd"
    assert site.paths == ["/to-localhost", "/to-file"] and elsewhere.connections == 0


def test_a_redirect_loop_stops_at_max_redirects(config_dir):
    with serve({"/loop": redirect("/loop", 307)}) as site:
        job = fetch_job(config_dir, site.url("/loop"), follow_redirects=True, max_redirects=3)
    error, retry, _ = failed(job)
    assert error == "egress rejected: too many redirects: more than 3 (max_redirects)" and retry is False
    assert site.paths == ["/loop"] * 4


def test_dns_is_resolved_once_and_the_connection_goes_to_the_checked_address(config_dir, tmp_path, monkeypatch):
    """A rebinding DNS server answers the check with one address and the connect with another.
    The plugin's resolver here answers 127.0.0.1 first and 127.0.0.2 after: the page must come
    from 127.0.0.1, asked for by name, and the name must be looked up once."""
    lookups = tmp_path / "lookups"
    (tmp_path / "sitecustomize.py").write_text(
        "import os, socket\n"
        "real = socket.getaddrinfo\n"
        "def rebinding(host, port, *args, **kwargs):\n"
        "    if host != 'rebind.test':\n"
        "        return real(host, port, *args, **kwargs)\n"
        "    with open(os.environ['FETCH_TEST_LOOKUPS'], 'a') as log:\n"
        "        first = log.tell() == 0\n"
        "        log.write(host + '\\n')\n"
        "    return real('127.0.0.1' if first else '127.0.0.2', port, *args, **kwargs)\n"
        "socket.getaddrinfo = rebinding\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FETCH_TEST_LOOKUPS", str(lookups))
    config_dir.service["plugin_env_passthrough"] = ["PYTHONPATH", "FETCH_TEST_LOOKUPS"]
    with serve({"/": page()}) as checked, serve({"/": page(b"rebound")}, "127.0.0.2", checked.port) as rebound:
        job = fetch_job(config_dir, f"http://rebind.test:{checked.port}/", allowed_hosts=["rebind.test"])
    assert completed(job)["content"] == PAGE.decode()
    assert checked.requests[0][1]["Host"] == f"rebind.test:{checked.port}" and rebound.connections == 0
    assert lookups.read_text() == "rebind.test\n"


@pytest.mark.process
def test_https_names_the_host_in_sni_and_host_and_checks_the_certificate(config_dir, tmp_path, monkeypatch):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost"),
        ],
        check=True,
        capture_output=True,
    )
    server_names: list[str | None] = []

    def sni(sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        server_names.append(name)

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    tls.sni_callback = sni
    # The plugin trusts the test's certificate through OpenSSL's own variable, passed through.
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    config_dir.service["plugin_env_passthrough"] = ["SSL_CERT_FILE"]
    with serve({"/": page()}, tls=tls) as site:
        job = fetch_job(config_dir, f"https://localhost:{site.port}/", allowed_hosts=["localhost"])
        mismatch = fetch_job(config_dir, f"https://127.0.0.1:{site.port}/")
    assert completed(job)["content"] == PAGE.decode()
    assert server_names[0] == "localhost" and site.requests[0][1]["Host"] == f"localhost:{site.port}"
    # The certificate names localhost, not 127.0.0.1: refused, and nothing was asked.
    error, retry, _ = failed(mismatch)
    assert error.startswith(f"TLS with 127.0.0.1:{site.port} failed:") and "certificate verify failed" in error
    assert retry is True and len(site.requests) == 1


# -- the body cap and the timeouts -----------------------------------------------------------


def stream(total: int) -> Answer:
    """A body of `total` bytes with no Content-Length, written as fast as the client reads."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(total // len(chunk)):
                handler.wfile.write(chunk)
        except OSError:
            pass  # the client stopped reading and closed

    return answer


def test_a_body_over_max_response_bytes_fails_and_stops_the_reading(config_dir):
    declared = page(b"x" * (1024 * 1024 + 1), "text/plain")
    with serve({"/declared": declared, "/stream": stream(64 * 1024 * 1024), "/fits": page(b"x" * 1024)}) as site:
        job = fetch_job(config_dir, site.url("/declared"))
        streamed = fetch_job(config_dir, site.url("/stream"))
        small = fetch_job(config_dir, site.url("/fits"), max_response_bytes=1024)
        over = fetch_job(config_dir, site.url("/fits"), max_response_bytes=1023)
    for big in (job, streamed):
        error, retry, event = failed(big)
        assert error == "egress rejected: response body exceeds max_response_bytes (1048576)" and retry is False
        assert event["error"] == "response body exceeds max_response_bytes (1048576)"
    assert completed(small)["content_length"] == 1024
    assert failed(over)[0] == "egress rejected: response body exceeds max_response_bytes (1023)"
    # The streamed body was read no further than the cap: the reading stopped well short of 64 MiB.
    body = {s["name"]: s for s in JobStopwatch.objects.get(job_id=streamed.id).subs_json}["fetch.body_read"]
    assert 1024 * 1024 < body["bytes"] <= 1024 * 1024 + 65536 and body["status"] == "err"


def test_a_server_that_never_answers_fails_within_the_read_timeout(config_dir):
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody answers
        port = silent.getsockname()[1]
        started = time.monotonic()
        job = fetch_job(config_dir, f"http://127.0.0.1:{port}/", read_timeout_seconds=0.5, timeout_seconds=20)
        took = time.monotonic() - started
    error, retry, _ = failed(job)
    assert error == f"timed out after 0.5s waiting for 127.0.0.1:{port} to answer" and retry is True
    assert took < 5


def test_a_server_that_drips_its_body_fails_within_the_total_timeout(config_dir):
    def drip(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        try:
            for _ in range(1000):
                handler.wfile.write(b"x")
                handler.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass

    with serve({"/": drip}) as site:
        started = time.monotonic()
        job = fetch_job(config_dir, site.url(), timeout_seconds=1, read_timeout_seconds=0.5)
        took = time.monotonic() - started
    error, retry, _ = failed(job)
    assert error == f"timed out after 1s (timeout_seconds) fetching {site.url()}" and retry is True
    assert took < 5


def test_a_peer_that_never_completes_the_handshake_fails_within_the_connect_timeout(config_dir):
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)  # one connection waits to be accepted; the kernel drops the next SYNs
        port = full.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            started = time.monotonic()
            job = fetch_job(config_dir, f"http://127.0.0.1:{port}/", connect_timeout_seconds=0.5)
            took = time.monotonic() - started
    error, retry, _ = failed(job)
    assert error == f"timed out connecting to 127.0.0.1:{port} (127.0.0.1) after 0.5s" and retry is True
    assert took < 5


def test_an_unreachable_port_and_an_http_error_fail_and_may_be_retried(config_dir):
    port = free_port()
    job = fetch_job(config_dir, f"http://127.0.0.1:{port}/")
    error, retry, event = failed(job)
    assert error == f"cannot connect to 127.0.0.1:{port} (127.0.0.1): Connection refused" and retry is True
    assert event == {"url": f"http://127.0.0.1:{port}/", "error": error}
    with serve({}) as site:
        error, retry, _ = failed(fetch_job(config_dir, site.url("/missing")))
    assert (error, retry) == ("HTTP 404: Not Found", True)


# -- config, health and the interpreter ------------------------------------------------------


def test_bad_config_and_a_missing_url_fail_without_retry_and_without_contacting_anyone(config_dir):
    with serve({"/": page()}) as site:
        bad = fetch_job(config_dir, site.url(), output_format="pdf")
        no_hosts = fetch_job(config_dir, site.url(), allowed_hosts="127.0.0.1")
        config_dir.plugins["fetch"] = {"config": {}, "retry": {"max_attempts": 1}}
        with installed_runtime(config_dir) as runtime:
            no_url = run_job(runtime, "fetch", command="handle", payload={"link": site.url()})
    assert site.connections == 0
    for job, error in (
        (bad, "config.output_format must be html, text or markdown, not 'pdf'"),
        (no_hosts, "config.allowed_hosts must be a list of host names, not '127.0.0.1'"),
        (no_url, "event must include url"),
    ):
        response = last_response(job)
        assert (response["error"], response["retry"], job.status) == (error, False, JobStatus.FAILED)
        assert "events" not in response


@pytest.mark.process
def test_config_check_strict_passes_and_plugin_list_shows_health_from_init(process_db):
    config_dir = process_db
    config_dir.extra = {"api": {"enabled": False}}  # strict mode would also want an API token
    config_dir.plugins = {
        "fetch": {"config": {"output_format": "markdown", "allowed_hosts": ["127.0.0.1"], "timeout_seconds": 10}},
        "fetch_pdf": {"uses": "fetch", "config": {"output_format": "pdf"}},
    }
    config_dir.write()
    code, check = ductile_json(config_dir, "config", "check", "--strict")
    assert (code, check["errors"], check["warnings"]) == (0, [], [])
    # `init` runs when the daemon first sees a plugin: it checks the config and the libraries.
    assert ductile(config_dir, "runworkers", "--once").returncode == 0
    code, listed = ductile_json(config_dir, "plugin", "list")
    health = {p["name"]: (p["health"], p["commands"]) for p in listed["plugins"] if p["state"] != "available"}
    assert health == {
        "fetch": ("healthy", ["handle", "health", "init"]),
        "fetch_pdf": ("unhealthy", ["handle", "health", "init"]),
    }
    assert "_lib" not in json.dumps(listed)


@pytest.mark.process
def test_the_gateway_interpreter_runs_fetch_when_the_python3_on_path_lacks_its_libraries(
    config_dir, tmp_path, monkeypatch
):
    """`#!/usr/bin/env python3` finds the system's python3 when the gateway is started as
    `.venv/bin/ductile`; the plugin then runs itself again under DUCTILE_PYTHON."""
    bare = tmp_path / "bin"
    bare.mkdir()
    # A python3 without site-packages: it cannot import BeautifulSoup or markdownify.
    (bare / "python3").write_text(f'#!/bin/sh\ntouch {tmp_path}/used\nexec {sys.executable} -S "$@"\n')
    (bare / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bare}{os.pathsep}{os.environ['PATH']}")
    env = plugin_environment()
    assert env["DUCTILE_PYTHON"] == sys.executable
    without = {k: v for k, v in env.items() if k != "DUCTILE_PYTHON"}
    health = run_directly({"command": "health"}, without)
    assert health["error"] == f"{sys.executable} cannot import beautifulsoup4, markdownify " + (
        "(output_format text and markdown need them)"
    )
    with serve({"/": page()}) as site:
        job = fetch_job(config_dir, site.url(), output_format="markdown")
    assert completed(job)["content"].startswith("# Hello") and (tmp_path / "used").exists()
    assert Path(env["PATH"].split(os.pathsep)[0]) == bare
