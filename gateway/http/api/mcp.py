"""`/mcp`: the gateway's MCP server over Streamable HTTP (gateway/mcp/), on the API's address.

The door is the API's: the bearer token is authenticated here as for every route (a missing or
unknown one is a 401, counted as every other), and the token decides which tools the client sees
and may call. What the client sends is then handed, whole, to the SDK's application.

Streams. An answer that stays open (a `subscriptions/listen` stream, `job.wait`) holds this
request's thread while it lasts: it takes a seat of the event streams' caps (`api.max_streams`,
`api.max_streams_per_token`, as `/events` does: 429 or 503 past them) and a slot of
`api.max_concurrent_sync` (the threads synchronous callers may hold: 429 past it), both given
back when the answer ends, the client goes away or stops reading (gunicorn's send timeout); a
refusal is a JSON-RPC error for the request, with the status `/events` answers. The
SDK pings such a stream every 15 s, which finds a dead client within that; a stopping worker ends
its streams as it ends `/events`' (the client re-listens with the next worker).

Not in OpenAPI: it is one JSON-RPC endpoint whose operations are MCP's, described by the
protocol's own `tools/list` (docs/mcp.md).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request

from gateway.config.tokens import ApiToken
from gateway.http.api.auth import refused
from gateway.http.api.ops import JsonWhateverIsAccepted
from gateway.http.api.syncgate import Busy, caller_gone, sync_slot
from gateway.http.api.views import OPEN, Endpoint
from gateway.http.eventstream import STOPPING, stream_headers
from gateway.http.streamseats import Refusal, seats_beside
from gateway.mcp.keys import CALLER_KEY, GONE_KEY, STREAMS_KEY

# The SDK's answer headers passed on (hop-by-hop ones, such as Connection, are gunicorn's own).
PASSED_HEADERS = ("content-type", "cache-control", "allow", "www-authenticate")


def message_of(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC message posted, when it is one object (anything else the SDK answers)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def streams(message: dict[str, Any] | None, tools: dict[str, Any]) -> bool:
    """Whether the request's answer stays open while something runs: a listen stream, or a tool
    that waits (`Tool.streams`)."""
    if message is None:
        return False
    if message.get("method") == "subscriptions/listen":
        return True
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    tool = tools.get(name) if message.get("method") == "tools/call" and isinstance(name, str) else None
    return bool(tool is not None and tool.streams)


def ended(gone: Callable[[], bool] | None) -> Callable[[], bool]:
    """Whether an open answer should end: its client went away, or this worker stops (the signal
    that ends `/events`' streams, eventstream.STOPPING), which would otherwise wait for it."""
    return lambda: STOPPING.is_set() or (gone is not None and gone())


def refusal(message: dict[str, Any], status: int, words: str) -> HttpResponse:
    """A stream refused for a cap, as MCP clients read an error: a JSON-RPC error for the request."""
    error = {"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32000, "message": words}}
    return HttpResponse(json.dumps(error), status=status, content_type="application/json", headers={"Retry-After": "5"})


class Mcp(Endpoint):
    needs = OPEN  # any valid token: its scopes choose the tools (gateway/mcp/catalogue.py)
    content_negotiation_class = JsonWhateverIsAccepted  # MCP clients accept JSON and SSE both

    @extend_schema(exclude=True)
    def get(self, request: Request) -> HttpResponseBase:
        return self.serve(request)

    @extend_schema(exclude=True)
    def post(self, request: Request) -> HttpResponseBase:
        return self.serve(request)

    @extend_schema(exclude=True)
    def delete(self, request: Request) -> HttpResponseBase:
        return self.serve(request)

    def serve(self, request: Request) -> HttpResponseBase:
        # Here, not at the module's import: the SDK with pydantic and starlette is ~70 MB in each
        # API worker, which most gateways never ask for MCP (idle RSS over its 300 MB target).
        from gateway.mcp.catalogue import Caller, catalogue

        token = request.auth
        if not isinstance(token, ApiToken):
            raise NotAuthenticated(refused(request, "missing bearer token"))
        body = request.body
        message = message_of(body)
        held = ExitStack()
        held_stream = message is not None and streams(message, catalogue(self.runtime).tools)
        if message is not None and held_stream:
            refused_stream = self.hold_stream(held, token, message)
            if refused_stream is not None:
                return refused_stream
        try:
            environ = {
                **request.META,
                "wsgi.input": io.BytesIO(body),
                "CONTENT_LENGTH": str(len(body)),
                CALLER_KEY: Caller(token),
            }
            if held_stream:
                environ[STREAMS_KEY] = True
                environ[GONE_KEY] = ended(caller_gone(request.META))
            return answer(environ, held)
        except BaseException:
            held.close()
            raise

    def hold_stream(self, held: ExitStack, token: ApiToken, message: dict[str, Any]) -> HttpResponse | None:
        """A seat and a slot for a stream, held by `held`; or the answer that refuses it."""
        config = self.runtime.config
        seat = seats_beside(config.state_path).take(
            f"token {token.name}", per_holder=config.api.max_streams_per_token, total=config.api.max_streams
        )
        if isinstance(seat, Refusal):
            return refusal(message, seat.status, seat.message)
        held.callback(seat)
        try:
            held.enter_context(sync_slot(config.state_path.parent / "sync-slots", config.api.max_concurrent_sync))
        except Busy:
            held.close()
            limit = config.api.max_concurrent_sync
            return refusal(message, 429, f"{limit} callers already hold an open answer (api.max_concurrent_sync)")
        return None


def answer(environ: dict[str, Any], held: ExitStack) -> HttpResponseBase:
    """The SDK's answer as Django's: whole when it is JSON, streamed (holding `held`) when SSE."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started[:] = [int(status.split()[0]), headers]

    from gateway.mcp.web import wsgi_app  # at the first /mcp request (MCP.serve says why)

    chunks = wsgi_app()(environ, start_response)
    first = next(chunks, b"")  # a2wsgi starts the answer as its first chunk comes
    status, headers = started
    kept = [(k, v) for k, v in headers if k.lower() in PASSED_HEADERS]
    if not any(k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in kept):
        try:
            response = HttpResponse(first + b"".join(chunks), status=status)
        finally:
            chunks.close()  # type: ignore[attr-defined]
            held.close()
        for k, v in kept:
            response[k] = v
        return response

    def rest() -> Iterator[bytes]:
        try:
            yield first
            yield from chunks
        finally:
            chunks.close()  # type: ignore[attr-defined]
            held.close()

    streamed = stream_headers(StreamingHttpResponse(rest(), status=status))
    for k, v in kept:
        if k.lower() != "cache-control":
            streamed[k] = v
    return streamed
