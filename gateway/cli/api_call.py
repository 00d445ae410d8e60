"""`api PATH`: one call to the gateway's HTTP API from the command line (spec 000 Operator
Handbook, "API (direct gateway calls)"), with urllib.

Where: `--api-url`, else the `api.listen` (a wildcard host is reached on loopback) of the gateway
running on this config's state directory, else the config's. Who: `--api-key`, else
$DUCTILE_API_KEY or $DUCTILE_TOKEN, else the first `*`-scoped token of that gateway or config
(gateway.daemon.control.served_runtime). What: `-f key=value` fields make the body
`{"payload": {key: value}}` on the trigger paths (`/plugin/…`, `/pipeline/…`, as the Handbook's
examples send them), the query string on a GET (`api /jobs -f status=failed`), and a flat JSON
object on other methods; `-b` sends a body as given. The method is POST on a trigger path with
fields and whenever `-b` gives a body, GET otherwise, unless `-X` says.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.runtime import Runtime

TOKEN_VARIABLES = ("DUCTILE_API_KEY", "DUCTILE_TOKEN")
TRIGGER_PREFIXES = ("/plugin/", "/pipeline/")
WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "[::1]", "": "127.0.0.1"}


class Writable(Protocol):
    def write(self, text: str) -> Any: ...
    def flush(self) -> None: ...


class UsageError(ValueError):
    """A flag that cannot make a request (exit 2)."""


class ApiUnanswered(Exception):
    """A gateway that could not be reached, refused the call, or answered something but a JSON object."""


@dataclass(frozen=True)
class ApiCall:
    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None

    def shown(self) -> dict[str, Any]:
        """The request as `--dry-run` and `-v` show it: the bearer token hidden."""
        headers = {k: ("Bearer ***" if k.lower() == "authorization" else v) for k, v in self.headers.items()}
        body: Any = None
        if self.body is not None:
            text = self.body.decode("utf-8", "replace")
            try:
                body = json.loads(text)
            except ValueError:
                body = text
        return {"method": self.method, "url": self.url, "headers": headers, "body": body}


@dataclass(frozen=True)
class ApiAnswer:
    status: int
    reason: str
    content_type: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def parsed(self) -> Any:
        """The body as JSON when it is JSON, else as text."""
        text = self.body.decode("utf-8", "replace")
        if "json" in self.content_type:
            try:
                return json.loads(text)
            except ValueError:
                pass
        return text


def base_url(runtime: Runtime) -> str:
    listen = runtime.config.api.listen
    return f"http://{WILDCARD_HOSTS.get(listen.host, listen.host)}:{listen.port}"


def config_token(runtime: Runtime) -> str | None:
    return next((t.secret for t in runtime.tokens.tokens if "*" in t.scopes), None)


def env_token(environ: Mapping[str, str]) -> str | None:
    return next((environ[name] for name in TOKEN_VARIABLES if environ.get(name)), None)


def parse_fields(raw: Iterable[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"-f {item!r}: expected key=value")
        fields[key] = value
    return fields


def parse_headers(raw: Iterable[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for item in raw:
        name, sep, value = item.partition(":")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise UsageError(f"-H {item!r}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers


def build_call(
    path: str,
    *,
    base: str,
    token: str | None,
    method: str | None = None,
    fields: Sequence[str] = (),
    headers: Sequence[str] = (),
    body: str | None = None,
) -> ApiCall:
    if "://" in path:
        raise UsageError(f"PATH {path!r}: give the path only (e.g. /jobs); the server comes from --api-url")
    if not path.startswith("/"):
        path = "/" + path
    values = parse_fields(fields)
    if values and body is not None:
        raise UsageError("-f and -b both give a body: use one")
    trigger = path.startswith(TRIGGER_PREFIXES)
    verb = (method or ("POST" if (values and trigger) or body is not None else "GET")).upper()
    if not verb.isalpha():
        raise UsageError(f"-X {method!r}: not an HTTP method")
    sent: dict[str, str] = {"Accept": "application/json"}
    data = None
    if verb in ("GET", "HEAD", "DELETE") and values:
        path += ("&" if "?" in path else "?") + urllib.parse.urlencode(values)
    elif values:
        document = {"payload": values} if trigger else values
        data = json.dumps(document).encode()
    elif body is not None:
        data = body.encode()
    if data is not None:
        sent["Content-Type"] = "application/json"
    if token:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(parse_headers(headers))  # the caller's own headers win
    return ApiCall(verb, base.rstrip("/") + path, sent, data)


def send(call: ApiCall, *, timeout: float, stream_to: Writable | None = None) -> ApiAnswer:
    """Make the call. An event stream (`/events`) is copied line by line to `stream_to` as it
    arrives, until the server ends it; everything else is read whole. Raises OSError (with the
    reason) when the server cannot be reached."""
    request = urllib.request.Request(call.url, data=call.body, method=call.method, headers=dict(call.headers))
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        with error:
            headers = dict(error.headers.items())
            return ApiAnswer(error.code, error.reason, error.headers.get("Content-Type", ""), error.read(), headers)
    except urllib.error.URLError as error:
        raise OSError(str(error.reason)) from error
    with response:
        content_type = response.headers.get("Content-Type", "")
        if stream_to is not None and content_type.startswith("text/event-stream"):
            _copy_lines(response.readline, stream_to)
            return ApiAnswer(response.status, response.reason, content_type, b"")
        return ApiAnswer(
            response.status, response.reason, content_type, response.read(), dict(response.headers.items())
        )


def read_object(call: ApiCall, *, timeout: float) -> dict[str, Any]:
    """The JSON object a successful call answers; ApiUnanswered says why there is none."""
    try:
        answer = send(call, timeout=timeout)
    except OSError as exc:
        raise ApiUnanswered(f"cannot reach {call.url}: {exc}") from exc
    body = answer.parsed()
    if not answer.ok:
        reason = body.get("error") if isinstance(body, dict) else None
        raise ApiUnanswered(f"{call.method} {call.url} answered {answer.status} {answer.reason}: {reason or body}")
    if not isinstance(body, dict):
        raise ApiUnanswered(f"{call.method} {call.url} did not answer a JSON object")
    return body


def _copy_lines(readline: Callable[[], bytes], out: Writable) -> None:
    while line := readline():
        out.write(line.decode("utf-8", "replace"))
        out.flush()
