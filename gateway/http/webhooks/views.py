"""The listener's HTTP surface (spec 000 §10). Plain Django views, not DRF: the raw body must be read,
bounded, before anything parses it. Every answer is JSON; a failed signature says no more than
`forbidden` (§10.2), and the log says why, naming the endpoint, never the secret or the signature.

A delivery refused before its signature is proven (an oversized body, a missing or wrong
signature) comes from anyone who can reach the port: it is counted per client address and logged
at a bounded rate (gateway/http/refusals.py), as a failed API authentication is, so a flood costs
neither the disk nor the listener; `system status` shows the host's tally."""

from __future__ import annotations

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from gateway.http.api.errors import RETRY_AFTER, unavailable_message
from gateway.http.clients import client_address
from gateway.http.refusals import WEBHOOK_DELIVERY, Refusals
from gateway.http.webhooks.delivery import enqueue_delivery
from gateway.http.webhooks.signatures import signature_matches
from gateway.intake import Refused
from gateway.logs import logger
from gateway.reports import health_status
from gateway.runtime import RUNTIME, uptime_seconds

log = logger("webhooks")


REFUSALS = Refusals(WEBHOOK_DELIVERY)


# Exempt from CSRF: senders are other servers, authenticated by the signature alone.
@csrf_exempt
def receive(request: HttpRequest) -> HttpResponse:
    runtime = RUNTIME.get()
    endpoint = runtime.webhooks.by_path.get(request.path_info)
    if endpoint is None:
        return page_not_found(request)
    if request.method != "POST":
        return _method_not_allowed("POST")
    extra = {"plugin": endpoint.plugin, "command": endpoint.command}
    # The size comes first (§10.2): an oversized body is refused unread and unverified.
    body = read_body(request, endpoint.max_body_size)
    if body is None:
        REFUSALS.record(
            client_address(request), f"{endpoint.name}: body over {endpoint.max_body_size} bytes", request.path
        )
        return JsonResponse({"error": "payload too large"}, status=413)
    presented = request.headers.get(endpoint.signature_header)
    if not signature_matches(endpoint.secret, body, presented):
        reason = f"no {endpoint.signature_header} header" if not presented else "signature does not match"
        REFUSALS.record(client_address(request), f"{endpoint.name}: {reason}", request.path)
        return JsonResponse({"error": "forbidden"}, status=403)
    try:
        job_id = enqueue_delivery(runtime, endpoint, body)
    except Refused as exc:
        log.warning("webhook %s rejected: %s", endpoint.name, exc, extra=extra)
        return JsonResponse(exc.body(), status=exc.status)
    except DatabaseError as exc:
        # The sender should deliver again later; nothing of this delivery was kept.
        message = unavailable_message(exc, writing=True)
        log.warning("webhook %s refused: %s", endpoint.name, message, extra=extra)
        response = JsonResponse({"error": message}, status=503)
        response["Retry-After"] = str(RETRY_AFTER)
        return response
    log.info("webhook %s accepted", endpoint.name, extra={**extra, "job_id": job_id})
    return JsonResponse({"job_id": job_id, "status": "queued"}, status=202)


def read_body(request: HttpRequest, limit: int) -> bytes | None:
    """The raw body, or None when it is longer than `limit`. A declared Content-Length over the
    limit is refused without reading; whatever is declared, no more than `limit + 1` bytes are read."""
    declared = request.META.get("CONTENT_LENGTH")
    if declared:
        if declared.isdigit() and int(declared) > limit:
            return None
        read = request.read
    elif request.META.get("wsgi.input_terminated"):
        # A chunked body has no Content-Length, and Django reads such a body as empty; the server
        # says its input stream ends with the body, so it is read from there.
        read = request.META["wsgi.input"].read
    else:
        return b""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return None if size > limit else b"".join(chunks)


@csrf_exempt
def health(request: HttpRequest) -> HttpResponse:
    """§10.3: `/healthz` on the listener's port, unauthenticated."""
    if request.method not in ("GET", "HEAD"):
        return _method_not_allowed("GET, HEAD")
    return JsonResponse(health_status(RUNTIME.get(), uptime_seconds()))


def _method_not_allowed(allowed: str) -> JsonResponse:
    response = JsonResponse({"error": "method not allowed"}, status=405)
    response["Allow"] = allowed
    return response


# Django's 404 for the listener (its 400, 403 and 500 are the API's: gateway.http.api.errors).


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "not found"}, status=404)
