"""The egress proxy of `network: egress` (docs/sandbox.md): the only way out of the plugin's network
namespace, and the record of every host each job asked for.

One per worker process, started with its first egress job: a network namespace whose loopback
holds nothing but this proxy's listening socket (gateway.execution.namespaces), served by threads
of this process, which make their outgoing connections from the gateway's own namespace. Each job
gets credentials of its own in the `HTTP(S)_PROXY` URL its plugin is given
(`http://job-<id>:<secret>@127.0.0.1:3128`): that is how a request is attributed to its job, which
a shared proxy such as tinyproxy cannot do. A request without a live job's credentials is refused
(407); a host its job's `egress` list does not allow is refused (403) and recorded; an allowed one is
connected (HTTP CONNECT for TLS, which stays end to end, or a plain HTTP request forwarded with
`Connection: close`) and recorded. Why ours rather than a well-kept proxy: the per-job
attribution and the record are the point, and the protocol part is the small one.

It lives and dies with its worker process (its threads are daemon threads; the namespace goes
with the process's descriptor), so a worker restarted by the supervisor starts a new one, and so
does the next egress job after its listener failed.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import select
import socket
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gateway.execution.namespaces import NetworkNamespace, loopback_up, make_namespace
from gateway.logs import logger

log = logger("egress")

PORT = 3128  # inside the egress namespace, which has no other listener
_HEAD_CAP = 64 * 1024
_CONNECT_TIMEOUT = 10.0
_IDLE_TIMEOUT = 300.0
ALLOWED = "allowed"
REFUSED = "refused"


def allows(rules: tuple[str, ...], host: str, port: int) -> bool:
    """Whether `host:port` is in an `egress` list: `host` (any port), `host:port`, or `*.domain`
    (any name under the domain, not the domain itself), compared without case."""
    host = host.lower().rstrip(".")
    for rule in rules:
        name, _, rule_port = rule.lower().partition(":")
        if rule_port and int(rule_port) != port:
            continue
        if name.startswith("*.") and host.endswith(name[1:]) and len(host) > len(name) - 1:
            return True
        if name == host:
            return True
    return False


@dataclass
class Ticket:
    """One job's admission: the environment its plugin gets and what it asked for."""

    job_id: str
    user: str
    secret: str
    rules: tuple[str, ...]
    namespace: NetworkNamespace
    # (host:port, allowed|refused) -> requests
    asked: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def env(self) -> Mapping[str, str]:
        url = f"http://{self.user}:{self.secret}@127.0.0.1:{PORT}"
        # Both spellings: curl reads only the lower-case http_proxy, most others either.
        names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
        return {name: url for name in names}

    def hosts(self) -> list[tuple[str, str, int]]:
        """What was asked for: (host:port, allowed|refused, requests), in the order first asked."""
        return [(host, verdict, count) for (host, verdict), count in self.asked.items()]


class EgressProxy:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tickets: dict[str, Ticket] = {}
        self._namespace: NetworkNamespace | None = None
        self._pid = 0

    def admit(self, job_id: str, rules: tuple[str, ...]) -> Ticket:
        """Credentials for one job's plugin, valid until `release`; starts the proxy on first use."""
        namespace = self._started()
        ticket = Ticket(job_id, f"job-{job_id}", secrets.token_urlsafe(18), rules, namespace)
        with self._lock:
            self._tickets[ticket.user] = ticket
        return ticket

    def release(self, ticket: Ticket) -> list[tuple[str, str, int]]:
        """The job's plugin has ended: its credentials stop working; what it asked for."""
        with self._lock:
            self._tickets.pop(ticket.user, None)
            return ticket.hosts()

    def _started(self) -> NetworkNamespace:
        with self._lock:
            if self._namespace is None or self._pid != os.getpid():
                namespace, listener = make_namespace(_listen)
                assert listener is not None
                threading.Thread(target=self._accept, args=(listener,), name="ductile-egress", daemon=True).start()
                self._namespace, self._pid = namespace, os.getpid()
            return self._namespace

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                # The next egress job starts a new proxy, in a new namespace: the jobs running
                # now lose theirs (their requests fail), none is left without one.
                log.exception("the egress proxy's listener failed; the next egress job starts it again")
                with self._lock:
                    self._namespace = None
                listener.close()
                return
            threading.Thread(target=self._serve, args=(conn,), name="ductile-egress-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._handle(conn)
            except (OSError, ValueError):
                pass  # the plugin hung up or spoke nonsense: nothing to answer

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(_IDLE_TIMEOUT)
        head, rest = _read_head(conn)
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ", 2)
        headers = [line.split(":", 1) for line in header_lines if ":" in line]
        ticket = self._ticket(dict((k.strip().lower(), v.strip()) for k, v in headers).get("proxy-authorization"))
        if ticket is None:
            _answer(conn, 407, "Proxy Authentication Required", "this proxy serves only the jobs of the gateway")
            return
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            port = int(port_text)
        else:
            parts = urlsplit(target)
            if parts.scheme != "http" or not parts.hostname:
                _answer(conn, 400, "Bad Request", "expected an absolute http:// URL or CONNECT")
                return
            host, port = parts.hostname, parts.port or 80
        host = host.strip("[]")
        if not allows(ticket.rules, host, port):
            self._note(ticket, host, port, REFUSED)
            _answer(conn, 403, "Forbidden", f"{host}:{port} is not in this plugin's sandbox.egress list")
            return
        self._note(ticket, host, port, ALLOWED)
        try:
            upstream = socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT)
        except OSError as exc:
            _answer(conn, 502, "Bad Gateway", f"cannot connect to {host}:{port}: {exc}")
            return
        with upstream:
            upstream.settimeout(_IDLE_TIMEOUT)
            if method.upper() == "CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                path = urlsplit(target)._replace(scheme="", netloc="").geturl() or "/"
                kept = [
                    f"{k}:{v}"
                    for k, v in headers
                    if k.strip().lower() not in ("proxy-authorization", "proxy-connection", "connection")
                ]
                upstream.sendall(
                    "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""]).encode("latin-1")
                )
            if rest:
                upstream.sendall(rest)
            _relay(conn, upstream)

    def _ticket(self, authorization: str | None) -> Ticket | None:
        if not authorization or not authorization.lower().startswith("basic "):
            return None
        try:
            user, _, secret = base64.b64decode(authorization[6:].strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        with self._lock:
            ticket = self._tickets.get(user)
        return ticket if ticket is not None and secrets.compare_digest(ticket.secret, secret) else None

    def _note(self, ticket: Ticket, host: str, port: int, verdict: str) -> None:
        with self._lock:
            ticket.asked[(f"{host.lower()}:{port}", verdict)] += 1


def _listen() -> socket.socket:
    """Run inside the new namespace: its loopback up, and the proxy's socket on it."""
    loopback_up()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", PORT))
    listener.listen(64)
    return listener


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(8192)
        if not chunk or len(data) > _HEAD_CAP:
            raise ValueError("no complete request head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _answer(conn: socket.socket, code: int, reason: str, text: str) -> None:
    body = f"ductile egress proxy: {text}\n".encode()
    conn.sendall(
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n".encode()
        + (b'Proxy-Authenticate: Basic realm="ductile"\r\n' if code == 407 else b"")
        + b"\r\n"
        + body
    )


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides are done (a half-close is passed on)."""
    peer = {a: b, b: a}
    open_ = {a, b}
    while open_:
        ready, _, _ = select.select(list(open_), [], [], _IDLE_TIMEOUT)
        if not ready:
            return
        for sock in ready:
            data = sock.recv(65536)
            if data:
                peer[sock].sendall(data)
                continue
            open_.discard(sock)
            try:
                peer[sock].shutdown(socket.SHUT_WR)
            except OSError:
                pass


PROXY = EgressProxy()
