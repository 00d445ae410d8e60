"""The MCP server as a WSGI application, for the API's `/mcp` view (gateway/http/api/mcp.py).

The SDK serves Streamable HTTP as an ASGI application; the API is gunicorn's threaded WSGI
worker. a2wsgi's `ASGIMiddleware` bridges the two: one event loop per API process, on a thread
of its own, runs the SDK's app, and each request's thread feeds it the body and writes what it
answers. The SDK's session manager runs stateless (`stateless=True`): the API is several
processes, and a session one process holds would be unknown to the next request's. The
2026-07-28 protocol is stateless anyway (one self-contained POST per request); a handshake-era
client is served per request too. Answers are Server-Sent Events when the handler sends a
notification first (`job.wait`'s progress, a `subscriptions/listen` stream), JSON otherwise.

One thing a2wsgi leaves undone: when the WSGI server stops reading a streamed answer (the client
went away, or read too slowly: gunicorn's send timeout), the ASGI side is never told, and a
listen stream would wait for ever. `_Answer.close` cancels the request's task on the loop, so the
SDK's handler ends (and unsubscribes) with it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio
from a2wsgi import ASGIMiddleware
from a2wsgi.asgi import ASGIResponder
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from gateway.mcp.calls import ToolError
from gateway.mcp.catalogue import Caller
from gateway.mcp.keys import CALLER_KEY, GONE_KEY, STREAMS_KEY
from gateway.mcp.server import build_server

GONE_CHECK_SECONDS = 0.25
# The SDK's own cap on a request body; the API's (Django's DATA_UPLOAD_MAX_MEMORY_SIZE) is lower.
MAX_BODY = 4 * 1024 * 1024


def caller_of(ctx: Any) -> Caller:
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None) or {}
    caller = (scope.get("wsgi_environ") or {}).get(CALLER_KEY)
    if not isinstance(caller, Caller):
        raise ToolError("no authenticated caller: /mcp is served by the API's view, with a bearer token")
    return caller


class _Responder(ASGIResponder):
    task: asyncio.Task[None] | None = None

    async def start_asgi_app(self, environ: Any) -> asyncio.Task[None]:
        self.task = await super().start_asgi_app(environ)
        return self.task

    def __call__(self, environ: Any, start_response: Any) -> Iterator[bytes]:
        return _Answer(iter(super().__call__(environ, start_response)), self)


class _Answer(Iterator[bytes]):
    """The answer's chunks; closed before its end, it cancels the SDK's side of the request."""

    def __init__(self, chunks: Iterator[bytes], responder: _Responder) -> None:
        self.chunks = chunks
        self.responder = responder

    def __next__(self) -> bytes:
        return next(self.chunks)

    def close(self) -> None:
        task = self.responder.task
        if task is not None and not task.done():
            self.responder.loop.call_soon_threadsafe(task.cancel)
        self.chunks.close()  # type: ignore[attr-defined]


class _Bridge(ASGIMiddleware):
    def __call__(self, environ: Any, start_response: Any) -> Iterator[bytes]:
        return _Responder(self.app, self.loop, self.wait_time)(environ, start_response)


_APP: Callable[..., Iterator[bytes]] | None = None
_LOCK = threading.Lock()


def wsgi_app() -> Callable[..., Iterator[bytes]]:
    """This process's MCP application, started at the first request to `/mcp`: its loop's thread,
    the session manager (which enters the server's lifespan: the reload watcher)."""
    global _APP
    with _LOCK:
        if _APP is None:
            _APP = _start()
        return _APP


def _start() -> Callable[..., Iterator[bytes]]:
    # Two managers of one server each: an answer that may stream (SSE: a listen stream, job.wait's
    # progress) and every other, answered as JSON. The SDK's SSE path runs each request's handler
    # beside a task that watches for the client's disconnect; under a2wsgi every one of those is
    # another hand-over between the request's thread and the loop's, and under load each
    # hand-over waits for a CPU: the enqueueing calls' tail was several times the API's.
    streaming = _manager(build_server(caller_of), json_response=False)
    plain = _manager(build_server(caller_of, announces=False), json_response=True)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="mcp-loop", daemon=True).start()
    started = threading.Event()

    async def run() -> None:
        async with streaming.run(), plain.run():
            started.set()
            await asyncio.Event().wait()  # for the process's life

    asyncio.run_coroutine_threadsafe(run(), loop)
    started.wait(10)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        environ = scope.get("wsgi_environ") or {}
        if not environ.get(STREAMS_KEY):
            await plain.handle_request(scope, receive, send)
        elif (gone := environ.get(GONE_KEY)) is None:
            await streaming.handle_request(scope, receive, send)
        else:
            await _until_gone(streaming.handle_request, gone, scope, receive, send)

    return _Bridge(app, loop=loop)  # type: ignore[arg-type]


def _manager(server: Any, *, json_response: bool) -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(
        app=server,
        stateless=True,
        json_response=json_response,
        # Host and Origin: the API's own ALLOWED_HOSTS and CORS rules apply before the view,
        # and every request carries a bearer token a rebinding page cannot have.
        security_settings=None,
        max_request_body_size=MAX_BODY,
    )


async def _until_gone(app: Any, gone: Callable[[], bool], scope: Any, receive: Any, send: Any) -> None:
    """`app`'s answer, cut short when the client goes away: the handler is cancelled and the
    answer ended, so the request's thread (and the stream's seat) is let go at once."""
    said: set[str] = set()

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start" or not message.get("more_body", False):
            said.add(message["type"])
        await send(message)

    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while not gone():
                await anyio.sleep(GONE_CHECK_SECONDS)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        await app(scope, receive, sending)
        group.cancel_scope.cancel()
    if "http.response.body" not in said:  # cancelled mid-answer: the WSGI side waits for its end
        if "http.response.start" not in said:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
