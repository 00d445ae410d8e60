#!/usr/bin/env python3
"""fetch: GET `event.payload.url` and emit fetch.completed (the body as html, text or markdown) or
fetch.failed. Protocol v2; commands handle, health and init. README.md beside this file has the
config keys, the events and where this plugin differs from the original's.

Egress policy, checked for the URL and again for every redirect hop before anything is sent:
the scheme is http or https; a host in `denied_hosts` is refused; when `allowed_hosts` is set, any
other host is refused before a DNS query; the name is resolved once, every address it resolves to
must be public (not loopback, private, link-local, CGNAT, multicast, a cloud metadata endpoint or
another special-purpose range, in IPv4, IPv6 or an IPv6 form that embeds IPv4) unless the host is
in `allowed_hosts`, and the connection goes to one of those checked addresses: never a second
lookup a rebinding DNS server could answer differently. Host header, TLS SNI and certificate check
use the host name. The body stops at `max_response_bytes`; connect, read and total timeouts bound
every step.
"""

from __future__ import annotations

import http.client
import importlib.util
import ipaddress
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, Union
from urllib.parse import quote, urljoin, urlsplit

# A plugin writes nothing into plugin directories at run time (spec 000 §10), bytecode included.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "_lib"))
from _stopwatch import SUBS_RESPONSE_KEY, Spans  # noqa: E402 - the path is set just above

# Union and socket.timeout rather than `|` and TimeoutError: the python3 on PATH that runs this
# file may be older than the gateway's own (3.8 and up work).
IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

# Import name -> the distribution an operator installs (both in the project's pyproject.toml).
LIBRARIES = {"bs4": "beautifulsoup4", "markdownify": "markdownify"}
# Set before running this file again under DUCTILE_PYTHON, so that happens at most once.
REEXEC_MARK = "DUCTILE_FETCH_REEXEC"

FORMATS = ("html", "text", "markdown")
REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 64 * 1024
PHASES = ("fetch.dns", "fetch.connect", "fetch.first_byte", "fetch.body_read")

# Named apart from their ranges so the refusal says what the address is: AWS, GCP, Azure,
# OpenStack and DigitalOcean (169.254.169.254), AWS ECS tasks, AWS over IPv6, Alibaba Cloud.
METADATA = {
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
}
PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")]
CGNAT = ipaddress.ip_network("100.64.0.0/10")
# NAT64 prefixes (RFC 6052, RFC 8215): the last 32 bits are an IPv4 address a NAT64 gateway reaches.
NAT64 = [ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48")]


class ConfigInvalid(Exception):
    """A config value this plugin cannot use: not retried."""


class FetchFailed(Exception):
    """The fetch did not produce a page: fetch.failed with this message."""

    retry = True
    prefix = ""


class Refused(FetchFailed):
    """The egress policy (or a bound of it) said no: the original's "egress rejected", not retried."""

    retry = False
    prefix = "egress rejected: "


class Settings(NamedTuple):
    user_agent: str
    total: float
    connect: float
    read: float
    follow_redirects: bool
    max_redirects: int
    output_format: str
    max_bytes: int
    allowed: frozenset[str]
    denied: frozenset[str]


class Target(NamedTuple):
    """One hop's URL, admitted: its host and the addresses checked for it."""

    scheme: str
    host: str
    port: int
    path: str
    addresses: tuple[IPAddress, ...]

    @property
    def netloc(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class Page(NamedTuple):
    final_url: str
    status: int
    content_type: str
    charset: str | None
    markdown_tokens: str | None
    body: bytes


# -- config ------------------------------------------------------------------------------------


def settings(config: dict[str, Any]) -> Settings:
    total = _seconds(config, "timeout_seconds", 30.0)
    fmt = str(config.get("output_format") or "html").strip().lower()
    if fmt not in FORMATS:
        raise ConfigInvalid(f"config.output_format must be html, text or markdown, not {config['output_format']!r}")
    return Settings(
        user_agent=str(config.get("user_agent") or "ductile-fetch/1.0"),
        total=total,
        connect=_seconds(config, "connect_timeout_seconds", total),
        read=_seconds(config, "read_timeout_seconds", total),
        # The original's reading: only "true" (any case) or a YAML true turns it on.
        follow_redirects=str(config.get("follow_redirects", "false")).strip().lower() == "true",
        max_redirects=_count(config, "max_redirects", 10, minimum=0),
        output_format=fmt,
        max_bytes=_count(config, "max_response_bytes", 1024 * 1024, minimum=1),
        allowed=_hosts(config, "allowed_hosts"),
        denied=_hosts(config, "denied_hosts"),
    )


def _seconds(config: dict[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if isinstance(value, bool) or not 0 < seconds < float("inf"):
        raise ConfigInvalid(f"config.{key} must be a positive number of seconds, not {value!r}")
    return seconds


def _count(config: dict[str, Any], key: str, default: int, *, minimum: int) -> int:
    value = config.get(key, default)
    try:
        number = int(str(value).strip())
    except ValueError:
        number = minimum - 1
    if isinstance(value, bool) or number < minimum:
        raise ConfigInvalid(f"config.{key} must be a whole number of at least {minimum}, not {value!r}")
    return number


def _hosts(config: dict[str, Any], key: str) -> frozenset[str]:
    value = config.get(key) or []
    if not isinstance(value, list) or not all(isinstance(h, str) for h in value):
        raise ConfigInvalid(f"config.{key} must be a list of host names, not {value!r}")
    try:
        return frozenset(host_key(h) for h in value if h.strip())
    except UnicodeError as exc:
        raise ConfigInvalid(f"config.{key} holds a host name that is not valid: {exc}") from exc


def host_key(name: str) -> str:
    """A host name as compared and resolved: lower case, no trailing dot, IDNA for non-ASCII."""
    host = name.strip().lower().rstrip(".")
    return host if host.isascii() else host.encode("idna").decode("ascii")


def missing_libraries() -> list[str]:
    return [dist for module, dist in LIBRARIES.items() if importlib.util.find_spec(module) is None]


def run_under_gateway_python() -> None:
    """Run this file again under the gateway's interpreter when the python3 PATH found lacks the
    libraries: `#!/usr/bin/env python3` is the system's when the gateway was started as
    `.venv/bin/ductile`. Before stdin is read, so the request is still there for the new process."""
    python = os.environ.get("DUCTILE_PYTHON")
    if not python or os.environ.get(REEXEC_MARK) or not missing_libraries():
        return
    os.environ[REEXEC_MARK] = "1"
    try:
        os.execv(python, [python, os.path.abspath(__file__)])
    except OSError:
        pass  # stays here: health and a text or markdown fetch say what is missing


# -- egress ------------------------------------------------------------------------------------


def refusal(address: IPAddress) -> str | None:
    """Why `address` may not be fetched (the original's words), or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return refusal(address.ipv4_mapped)
        for embedded in _embedded_ipv4(address):
            reason = refusal(embedded)
            if reason:
                return f"{reason} (embedded in {address})"
    if address in METADATA:
        return f"address {address} is a cloud metadata endpoint"
    if address.is_unspecified:
        return f"address {address} is unspecified (0.0.0.0 / ::)"
    if address.is_loopback:
        return f"address {address} is loopback"
    if address.is_link_local:
        return f"address {address} is link-local"
    if any(address in network for network in PRIVATE):
        return f"address {address} is private (RFC1918 / ULA)"
    if address in CGNAT:
        return f"address {address} is shared address space (CGNAT, RFC 6598)"
    if address.is_multicast:
        return f"address {address} is multicast"
    if address.is_reserved:
        return f"address {address} is reserved"
    if not address.is_global:
        return f"address {address} is not globally routable (special-purpose range)"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> Iterator[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to: 6to4, Teredo's client, NAT64, IPv4-compatible."""
    if address.sixtofour is not None:
        yield address.sixtofour
    if address.teredo is not None:
        yield address.teredo[1]
    value = int(address)
    if any(address in network for network in NAT64) or 1 < value < 2**32:
        yield ipaddress.IPv4Address(value & 0xFFFFFFFF)


def admit(url: str, conf: Settings, deadline: float, phases: Phases) -> Target:
    """Check one hop's URL against the policy and resolve its host once: the addresses to connect to."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused(f"scheme {scheme!r} not in {{http, https}}: {url}")
    if not parts.hostname:
        raise Refused(f"missing hostname: {url}")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
        host = host_key(parts.hostname)
    except (ValueError, UnicodeError) as exc:
        raise Refused(f"invalid URL {url!r}: {exc}") from exc
    if host in conf.denied:
        raise Refused(f"host {host!r} is in denied_hosts")
    if conf.allowed and host not in conf.allowed:
        raise Refused(f"host {host!r} not in allowed_hosts")
    with phases.timed("fetch.dns"):
        addresses = resolve(host, port, deadline)
    # An allowed host is the operator's opt-in past the blocklist (loopback, an internal service);
    # its addresses are still the ones resolved here, pinned for the connect.
    if host not in conf.allowed:
        for address in addresses:
            reason = refusal(address)
            if reason:
                raise Refused(reason)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    # Spaces and non-ASCII as percent escapes (what a browser sends); escapes already there stay.
    return Target(scheme, host, port, quote(path, safe="!#$%&'()*+,/:;=?@[]~"), addresses)


def resolve(host: str, port: int, deadline: float) -> tuple[IPAddress, ...]:
    """Every address `host` resolves to, in the resolver's order. getaddrinfo has no timeout of its
    own: it runs on a thread, waited for until the deadline."""
    found: dict[str, Any] = {}

    def lookup() -> None:
        try:
            found["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            found["error"] = exc

    worker = threading.Thread(target=lookup, daemon=True)
    worker.start()
    worker.join(remaining(deadline))
    if worker.is_alive():
        raise FetchFailed(f"DNS resolution for {host!r} timed out")
    if "error" in found:
        raise Refused(f"DNS resolution failed for {host!r}: {found['error']}")
    addresses: dict[IPAddress, None] = {}
    for _family, _type, _proto, _name, sockaddr in found["infos"]:
        addresses.setdefault(ipaddress.ip_address(sockaddr[0]), None)
    if not addresses:
        raise Refused(f"DNS returned no addresses for {host!r}")
    return tuple(addresses)


# -- the request -------------------------------------------------------------------------------


class Phases:
    """Time per phase, summed over the hops of a redirect chain: one sub-span each, whatever the
    number of hops, so the stopwatch's cap never drops the body's span."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = {}
        self.count: dict[str, int] = {}
        self.failed: set[str] = set()
        self.body_bytes = 0

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = time.perf_counter_ns()
        try:
            yield
        except BaseException:
            self.failed.add(name)
            raise
        finally:
            self.ns[name] = self.ns.get(name, 0) + time.perf_counter_ns() - started
            self.count[name] = self.count.get(name, 0) + 1

    def report(self, spans: Spans) -> None:
        for name in PHASES:
            if name not in self.ns:
                continue
            extra: dict[str, Any] = {"status": "err" if name in self.failed else "ok"}
            if self.count[name] > 1:
                extra["count"] = self.count[name]
            if name == "fetch.body_read":
                extra["bytes"] = self.body_bytes
            spans.add(name, self.ns[name], **extra)


def remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TotalTimeout()
    return left


class TotalTimeout(FetchFailed):
    def __init__(self) -> None:
        super().__init__("the total timeout (timeout_seconds) ran out")


@contextmanager
def total_deadline(seconds: float) -> Iterator[float]:
    """The whole fetch within `seconds`: per-operation socket timeouts cannot bound a server that
    drips a byte per read, so SIGALRM interrupts whatever call is waiting when time is up."""

    def expire(signum: int, frame: Any) -> None:
        raise TotalTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield time.monotonic() + seconds
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def fetch(url: str, conf: Settings, phases: Phases) -> Page:
    """GET `url`, following redirects as configured, each hop admitted before it is contacted."""
    try:
        with total_deadline(conf.total) as deadline:
            current, redirects = url, 0
            while True:
                target = admit(current, conf, deadline, phases)
                conn = connect(target, conf, deadline, phases)
                response = None
                try:
                    response = send(conn, target, conf, phases)
                    location = response.getheader("Location")
                    if response.status in REDIRECTS and location:
                        if not conf.follow_redirects:
                            raise Refused(
                                f"redirect refused: HTTP {response.status} to {location} (follow_redirects=false)"
                            )
                        redirects += 1
                        if redirects > conf.max_redirects:
                            raise Refused(f"too many redirects: more than {conf.max_redirects} (max_redirects)")
                        current = urljoin(current, location)
                        continue
                    if not 200 <= response.status < 300:
                        raise FetchFailed(f"HTTP {response.status}: {response.reason}")
                    body = read_body(response, target, conf, phases)
                    return Page(
                        final_url=current,
                        status=response.status,
                        content_type=response.headers.get_content_type(),
                        charset=response.headers.get_content_charset(),
                        markdown_tokens=response.getheader("x-markdown-tokens"),
                        body=body,
                    )
                finally:
                    if response is not None:
                        response.close()
                    conn.close()
    except TotalTimeout as exc:
        raise FetchFailed(f"timed out after {conf.total:g}s (timeout_seconds) fetching {url}") from exc


def connect(target: Target, conf: Settings, deadline: float, phases: Phases) -> http.client.HTTPConnection:
    """A connection to one of the checked addresses; TLS names the host (SNI, certificate). Its
    socket waits at most read_timeout_seconds for each read (the total is SIGALRM's)."""
    with phases.timed("fetch.connect"):
        sock, failure = None, ""
        for address in target.addresses:
            timeout = min(conf.connect, remaining(deadline))
            try:
                sock = socket.create_connection((str(address), target.port), timeout=timeout)
                break
            except socket.timeout:
                failure = f"timed out connecting to {target.netloc} ({address}) after {timeout:g}s"
            except OSError as exc:
                failure = f"cannot connect to {target.netloc} ({address}): {exc.strerror or exc}"
        if sock is None:
            raise FetchFailed(failure)
        if target.scheme == "https":
            import ssl  # here: most fetches are not https, and it is the heaviest import

            context = ssl.create_default_context()
            try:
                sock = context.wrap_socket(sock, server_hostname=target.host)
            except (ssl.SSLError, OSError) as exc:
                sock.close()
                raise FetchFailed(f"TLS with {target.netloc} failed: {exc}") from exc
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(target.host, target.port, context=context)
        else:
            conn = http.client.HTTPConnection(target.host, target.port)
    # A connection given its socket never resolves or connects by itself: http.client only builds
    # the request, its Host header from the host name.
    sock.settimeout(conf.read)
    conn.sock = sock
    return conn


def send(
    conn: http.client.HTTPConnection, target: Target, conf: Settings, phases: Phases
) -> http.client.HTTPResponse:
    headers = {"User-Agent": conf.user_agent}
    if conf.output_format == "markdown":
        # Content negotiation as the original: a server that can answer in markdown does.
        headers["Accept"] = "text/markdown, text/html"
    with phases.timed("fetch.first_byte"):
        try:
            conn.request("GET", target.path, headers=headers)
            return conn.getresponse()
        except socket.timeout as exc:
            raise FetchFailed(f"timed out after {conf.read:g}s waiting for {target.netloc} to answer") from exc
        except (http.client.HTTPException, OSError) as exc:
            raise FetchFailed(f"no valid HTTP response from {target.netloc}: {exc!r}") from exc


def read_body(response: http.client.HTTPResponse, target: Target, conf: Settings, phases: Phases) -> bytes:
    """The body, read no further than one chunk past `max_response_bytes`."""
    too_big = f"response body exceeds max_response_bytes ({conf.max_bytes})"
    declared = (response.getheader("Content-Length") or "").strip()
    if declared.isdigit() and int(declared) > conf.max_bytes:
        raise Refused(too_big)
    chunks: list[bytes] = []
    with phases.timed("fetch.body_read"):
        while True:
            try:
                # read1: at most one read from the socket, so each wait is one read timeout.
                chunk = response.read1(CHUNK)
            except socket.timeout as exc:
                raise FetchFailed(f"timed out after {conf.read:g}s reading the body from {target.netloc}") from exc
            except (http.client.HTTPException, OSError) as exc:
                raise FetchFailed(f"reading the body from {target.netloc} failed: {exc!r}") from exc
            if not chunk:
                break
            phases.body_bytes += len(chunk)
            if phases.body_bytes > conf.max_bytes:
                raise Refused(too_big)
            chunks.append(chunk)
    return b"".join(chunks)


# -- the content -------------------------------------------------------------------------------


def render(page: Page, output_format: str) -> tuple[str, str]:
    """The content in the format asked for, and the format it is in."""
    try:
        text = page.body.decode(page.charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = page.body.decode("utf-8", errors="replace")
    if output_format == "html" or (output_format == "markdown" and page.content_type == "text/markdown"):
        return text, output_format
    from bs4 import BeautifulSoup

    # Python's own parser: no compiled dependency, and it takes any HTML without raising.
    soup = BeautifulSoup(text, "html.parser")
    # What a reader never sees; the original's text drops the same elements.
    for element in soup(["script", "style", "noscript", "head", "template"]):
        element.decompose()
    if output_format == "text":
        return "\n".join(soup.stripped_strings), "text"
    from markdownify import ATX, MarkdownConverter

    # markdownify recurses about twice per level of nesting: Python's default limit (1000) fails
    # a page 500 elements deep. This one converts ~1,600 levels (half a second); deeper, the
    # RecursionError is reported as a failed conversion.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    return MarkdownConverter(heading_style=ATX).convert_soup(soup).strip(), "markdown"


# -- commands ----------------------------------------------------------------------------------


def respond(
    status: str,
    *,
    result: str | None = None,
    error: str | None = None,
    retry: bool = True,
    events: list[dict[str, Any]] | None = None,
    logs: list[dict[str, str]] | None = None,
    spans: Spans | None = None,
) -> dict[str, Any]:
    response: dict[str, Any] = {"status": status}
    if error is not None:
        response["error"] = error
        response["retry"] = retry
    if result is not None:
        response["result"] = result
    if events:
        response["events"] = events
    response["logs"] = logs or []
    if spans is not None and len(spans):
        response[SUBS_RESPONSE_KEY] = spans.to_response_key()
    return response


def check(config: dict[str, Any]) -> dict[str, Any]:
    """health and init: the config is usable and the libraries import."""
    try:
        settings(config)
    except ConfigInvalid as exc:
        return respond("error", error=str(exc), retry=False)
    missing = missing_libraries()
    if missing:
        error = f"{sys.executable} cannot import {', '.join(missing)} (output_format text and markdown need them)"
        return respond("error", error=error, retry=False)
    return respond("ok", result="healthy", logs=[{"level": "info", "message": "healthy"}])


def handle(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    event = request.get("event") or {}
    url = (event.get("payload") or {}).get("url") or event.get("url")
    if not url:
        message = "handle: no url in event payload"
        return respond("error", error="event must include url", retry=False, logs=[_log("error", message)])
    if not isinstance(url, str):
        return respond("error", error=f"payload.url must be a string, not {url!r}", retry=False)
    try:
        conf = settings(config)
    except ConfigInvalid as exc:
        return respond("error", error=str(exc), retry=False, logs=[_log("error", str(exc))])
    if conf.output_format != "html" and missing_libraries():
        return check(config)

    spans, phases = Spans(), Phases()
    try:
        page = fetch(url, conf, phases)
    except FetchFailed as exc:
        phases.report(spans)
        failed = {"type": "fetch.failed", "payload": {"url": url, "error": str(exc)}}
        logs = [_log("error", f"fetch failed for {url}: {exc.prefix}{exc}")]
        return respond("error", error=f"{exc.prefix}{exc}", retry=exc.retry, events=[failed], logs=logs, spans=spans)
    phases.report(spans)

    try:
        with spans.time("fetch.convert") as span:
            content, output_format = render(page, conf.output_format)
            span.annotate(status="ok")
    except RecursionError:
        # markdownify walks the tree recursively: a page nested thousands of elements deep.
        error = f"cannot convert {page.final_url} to {conf.output_format}: its HTML is nested too deeply"
        failed = {"type": "fetch.failed", "payload": {"url": url, "error": error}}
        return respond("error", error=error, retry=False, events=[failed], logs=[_log("error", error)], spans=spans)
    payload: dict[str, Any] = {
        "url": url,
        "final_url": page.final_url,
        "status_code": page.status,
        "content_length": len(content),
        "output_format": output_format,
        "content": content,
    }
    if page.markdown_tokens is not None:
        # A header the server controls: a bad one is a bounded, reported failure.
        try:
            payload["markdown_tokens"] = int(page.markdown_tokens)
        except ValueError:
            bad = page.markdown_tokens
            failed = {"type": "fetch.failed", "payload": {"url": url, "error": "invalid x-markdown-tokens header"}}
            return respond(
                "error",
                error=f"invalid x-markdown-tokens header from {page.final_url}: {bad!r}",
                retry=False,
                events=[failed],
                logs=[_log("error", f"invalid x-markdown-tokens header: {bad!r}")],
                spans=spans,
            )
    logs = [_log("info", f"fetched {url} → {page.status} ({len(content)} chars, format={output_format})")]
    if page.final_url != url:
        logs.append(_log("info", f"redirected to {page.final_url}"))
    return respond(
        "ok",
        result=f"fetched {url} ({len(content)} chars, format={output_format})",
        events=[{"type": "fetch.completed", "payload": payload}],
        logs=logs,
        spans=spans,
    )


def _log(level: str, message: str) -> dict[str, str]:
    return {"level": level, "message": message}


def main() -> None:
    run_under_gateway_python()
    request = json.load(sys.stdin)
    command = request.get("command", "handle")
    config = request.get("config") or {}
    if command == "handle":
        response = handle(request, config)
    elif command in ("health", "init"):
        response = check(config)
    else:
        response = respond("error", error=f"unknown command: {command}", retry=False)
    json.dump(response, sys.stdout)


if __name__ == "__main__":
    main()
