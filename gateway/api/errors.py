"""Every error is JSON `{"error": "…"}` with the spec's status codes, never an HTML page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from gateway.logs import logger

log = logger("api")


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None:
        log.exception("unhandled error in %s", context.get("view").__class__.__name__, exc_info=exc)
        return Response({"error": "internal server error"}, status=500)
    detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
    response.data = {"error": _flatten(detail)}
    return response


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
