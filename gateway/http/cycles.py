"""A request's objects freed by reference counting when its response closes, not by the garbage
collector.

Django and DRF tie each request's objects into reference cycles: django.contrib.auth's
`request.auser` and `request.user` (a partial of the request, and a lazy object whose function
names it), the messages storage (which holds the request), and DRF's view, Request and Response,
each reaching the others (and the view itself, through its `head`). A cycle outlives its
last outside reference until the collector finds it, so ~80 objects of every API request were
left to it: under 500 requests/s an API worker ran a young-generation collection every ~10
requests, each holding the GIL (every thread of the worker stopped) for ~0.3 ms and, now and
then, 10-15 ms; ~75 µs of CPU per request in all (docs/performance-history.md, item 47). Cut when the
response closes, they go when the response's last reference does.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.http import HttpRequest, HttpResponseBase

# What a request holds that holds it (set by django.contrib.auth's and messages' middleware).
REQUEST_CYCLES = ("auser", "user", "_messages")


def release(request: HttpRequest, drf_context: dict[str, Any] | None) -> None:
    """Cut the cycles through `request`, and through DRF's view and Request when it answered."""
    attributes = vars(request)
    for name in REQUEST_CYCLES:
        attributes.pop(name, None)
    if drf_context:
        # DRF's view and Request exist for this request alone. The view names itself (Django's
        # View.setup sets its `head` to its own bound `get`), the Request and the Response; the
        # Request's parser_context names the view and the Request.
        for scoped in (drf_context.get("view"), drf_context.get("request")):
            if scoped is not None:
                vars(scoped).clear()
        drf_context.clear()  # the Response's own: names the view and the Request


class ReleaseAtClose:
    """Outermost middleware: `release` runs among the response's closers, which Django calls once
    the last byte is sent and before `request_finished`. Not sooner: a streaming response (the live
    views' event stream) still reads its request while it is sent."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        # Why not the response itself in the partial: it would hold the response in a list of its
        # own until close. DRF's context is set by the time the response comes back through here.
        response._resource_closers.append(partial(release, request, getattr(response, "renderer_context", None)))  # type: ignore[attr-defined]
        return response
