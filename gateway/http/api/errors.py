"""Every error is JSON `{"error": "…"}` with the spec's status codes, never an HTML page."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from gateway.config.errors import ConfigError
from gateway.intake import Refused
from gateway.logs import logger
from gateway.storage.database import storage_refusal, unavailable_reason
from ledger.writes.group_commit import CommitUnknown

log = logger("api")

# Seconds a client is told to wait before retrying when the database cannot answer.
RETRY_AFTER = 30


class Missing(exceptions.NotFound):
    """A 404 in the original's words (`job not found`, `plugin not found`, …), which its clients
    compare, with ours beside them as `detail`: which one was not found, and why or what there is."""

    def __init__(self, error: str, detail: str):
        super().__init__(error)
        self.words = detail


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, Missing):
        return Response({"error": str(exc.detail), "detail": exc.words}, status=404)
    if isinstance(exc, Refused):
        return Response(exc.body(), status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response({"error": f"the request body is larger than the API accepts ({limit:,} bytes)"}, status=413)
    if isinstance(exc, ConfigError):
        return config_unavailable(exc)
    if isinstance(exc, DatabaseError) or storage_refusal(exc) is not None:
        request = context.get("request")
        return database_unavailable(exc, writing=getattr(request, "method", "GET") not in ("GET", "HEAD", "OPTIONS"))
    response = exception_handler(exc, context)
    if response is None:
        log.exception("unhandled error in %s", context.get("view").__class__.__name__, exc_info=exc)
        return Response({"error": "internal server error"}, status=500)
    detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
    response.data = {"error": _flatten(detail)}
    return response


def config_unavailable(exc: ConfigError) -> Response:
    """503 with why: this process could not load the config (a worker started after it was broken:
    gunicorn starts one again when one dies, or on a reload), so nothing can be answered, not even
    who is asking. The problems name file, line and key; a reload of a fixed config mends it."""
    message = f"the gateway cannot serve: its config does not load: {exc}; fix it, then reload"
    log.error(message)
    return Response({"error": message}, status=503, headers={"Retry-After": str(RETRY_AFTER)})


def database_unavailable(exc: BaseException, *, writing: bool) -> Response:
    """503 with why, when the database refuses (a full disk, read-only files) or cannot be reached:
    the API stays up and says so, reads that still work keep working, and a refused write loses
    nothing because nothing was accepted (issue 12)."""
    message = unavailable_message(exc, writing=writing)
    log.warning(message)
    return Response({"error": message}, status=503, headers={"Retry-After": str(RETRY_AFTER)})


def unavailable_message(exc: BaseException, *, writing: bool) -> str:
    reason = unavailable_reason(exc)
    if isinstance(exc, CommitUnknown):
        # Neither "nothing was recorded" nor "recorded": a client that retries blindly may run it twice.
        return (
            f"the gateway lost its database connection while recording this ({reason}): it may have been "
            "recorded; look it up (GET /jobs) before you retry"
        )
    if writing:
        return f"the gateway's database refuses writes: {reason}; nothing was recorded, retry later"
    return f"the gateway's database cannot be read: {reason}; retry later"


def _flatten(detail: Any) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return "; ".join(_flatten(d) for d in detail)
    return str(detail)


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": f"no such endpoint: {request.path}"}, status=404)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "bad request"}, status=400)


def forbidden(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "forbidden"}, status=403)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"error": "internal server error"}, status=500)
