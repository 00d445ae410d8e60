"""An API request leaves nothing for the garbage collector: its objects go when its response
closes. The collector's passes hold the GIL, so under load each one stopped every thread of the
API worker; they were the tail of the API's latency (gateway/http/cycles.py)."""

from __future__ import annotations

import gc
import io
import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.handlers.wsgi import WSGIHandler

from tests.support.runtime import installed_runtime

# Real commits: the API's write transactions as they run in production (inside a test's rolled-back
# transaction they become savepoints, with objects of their own).
pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "tok-cycles"


@pytest.fixture
def app(config_dir) -> Iterator[WSGIHandler]:
    config_dir.extra["api"] = {"enabled": True, "auth": {"tokens": [{"name": "t", "token": TOKEN, "scopes": ["*"]}]}}
    with installed_runtime(config_dir):
        yield WSGIHandler()


def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
    return lambda data: None


def serve(app: WSGIHandler, method: str, path: str, body: dict | None = None, token: str | None = TOKEN) -> bytes:
    """One request as gunicorn makes it: the handler's answer read to its end, then closed."""
    raw = json.dumps(body).encode() if body is not None else b""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8080",
        "HTTP_HOST": "127.0.0.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(raw),
        "CONTENT_LENGTH": str(len(raw)),
        "CONTENT_TYPE": "application/json",
    }
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    response = app(environ, start_response)
    try:
        return b"".join(response)
    finally:
        response.close()


def left_for_the_collector(requests) -> Counter[str]:
    """The objects of `requests()` that only a collection frees, by type."""
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage
    try:
        requests()
        gc.collect()
        return Counter(type(found).__qualname__ for found in gc.garbage)
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()


def test_api_requests_leave_nothing_for_the_garbage_collector(app):
    job_id = json.loads(serve(app, "POST", "/plugin/echo/poll", {"payload": {}}))["job_id"]

    def requests() -> None:
        for _ in range(3):
            serve(app, "POST", "/plugin/echo/poll", {"payload": {"n": 1}})  # a trigger, the hot path
            serve(app, "GET", f"/job/{job_id}")
            serve(app, "GET", "/healthz")
            serve(app, "GET", "/jobs?limit=5")
            serve(app, "POST", "/plugin/nope/poll", {"payload": {}})  # an error answer
            serve(app, "GET", "/jobs", token=None)  # refused: 401

    # Before: ~80 objects a request (the view and its own bound `get`, DRF's Request and its
    # parser context, the auth middleware's partial, the messages storage).
    assert left_for_the_collector(requests) == Counter()


def test_saving_the_refusal_tally_leaves_nothing_for_the_collector(tmp_path) -> None:
    """The API saves its tally of refused requests from a timer thread of the worker; written with
    `indent`, json's pure-Python encoder left reference cycles at every save (and a later test's
    count of a request's garbage picked them up)."""
    from gateway.http.refusals import merge_tally, read_tally

    path = tmp_path / "auth-failures.json"
    merge_tally(path, {"198.51.100.7": (1, "bad token", "2026-11-28T12:00:00Z")})  # the file exists
    gc.collect()
    gc.disable()
    try:
        merge_tally(path, {"198.51.100.7": (2, "bad token", "2026-11-28T12:00:01Z")})
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert read_tally(path)["failures"] == 3
