"""CORS for the API, as the original answers it (its `api.allowed_origins`): a browser page served
from a listed origin may call the API with its bearer token; every other origin gets no CORS
header, so its browser keeps the answer from it. django-cors-headers adds the headers and answers
preflights before any authentication; this module says which requests it serves: those with an
`Origin` the running config lists exactly (the reloaded list, not the one the process started
with), on the API's routes only (the console's session cookie is never shared across origins).
An empty list, the default, shares nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.config.errors import ConfigError
from gateway.runtime import RUNTIME

if TYPE_CHECKING:  # every process connects `origin_allowed` (gateway.apps); few serve HTTP
    from django.http import HttpRequest

# Not the API's: the console's pages and its admin, which a session cookie authenticates.
_NOT_API = ("/admin/", "/dashboard/")


def origin_allowed(sender: Any, request: HttpRequest, **kwargs: Any) -> bool:
    """django-cors-headers' `check_request_enabled`: whether this request gets CORS headers."""
    origin = request.headers.get("Origin")
    if not origin or request.path_info.startswith(_NOT_API):
        return False
    try:
        return origin in RUNTIME.get().config.api.allowed_origins
    except ConfigError:
        return False  # no config loaded: the API answers 503 and shares nothing meanwhile
