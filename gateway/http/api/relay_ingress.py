"""Relay ingress on the API's own listener (spec 000 "Remote Event Relay": `remote_ingress.
listen_path` "is mounted on the main HTTP server"): `POST <listen_path>/<peer>`, authenticated by
the peer's HMAC signature, not a bearer token (gateway/relay/receiver.py).

The default path (`/ingest/peer/{peer}`) is a documented route; a configured `listen_path` other
than that is reached through the last route of the URLconf, which answers the usual 404 for any
other path."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from gateway.config.relay_endpoints import DEFAULT_LISTEN_PATH
from gateway.http.api.errors import not_found
from gateway.http.api.serializers import ErrorSerializer
from gateway.http.api.views import OPEN, Endpoint, path_param
from gateway.relay.receiver import Answer, receive
from gateway.runtime import RUNTIME


class _RawBody(BaseParser):
    """The signature covers the body's exact bytes, which the view reads itself: any type."""

    media_type = "*/*"


def _answer(request: HttpRequest, prefix: str, peer: str) -> Answer | None:
    """The receiver's answer, or None when `prefix` is not this gateway's ingress path."""
    runtime = RUNTIME.get()
    ingress = runtime.relay.ingress if runtime.relay else None
    if ingress is None or prefix.rstrip("/") != ingress.listen_path:
        return None
    return receive(runtime, ingress, peer, path=request.path, headers=dict(request.headers), body=request.body)


def _refusal(meaning: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=meaning)


class RelayIngress(Endpoint):
    """A peer gateway's relayed event (`X-Ductile-Peer`, `-Key-Id`, `-Timestamp`, `-Signature`)."""

    needs = OPEN
    authentication_classes: list[type] = []  # the signature is the credential
    parser_classes = [_RawBody]

    @extend_schema(
        operation_id="relay_ingress",
        tags=["relay"],
        summary="Accept an event relayed by a trusted peer gateway (HMAC-signed)",
        description=(
            "Mounted at `remote_ingress.listen_path` (default `/ingest/peer`). The body is the relay "
            'envelope `{"event": {"type", "payload", "dedupe_key"}, "origin": {...}, "baggage": {...}}`; '
            "it starts every local pipeline whose `on:` is the event type. A delivery accepted before (the same "
            "request again, or the same event type and `dedupe_key`, or without one the same `origin.event_id`) "
            "is answered with the first acceptance and starts nothing, whatever became of its jobs."
        ),
        parameters=[path_param("peer", "The sending gateway's name, as `remote_ingress.peers` lists it.")],
        request=OpenApiTypes.OBJECT,
        responses={
            202: OpenApiTypes.OBJECT,
            400: _refusal("The body is not a relay envelope; `error` says what is wrong."),
            403: _refusal(
                "Unknown peer, bad or missing signature, key id or timestamp (outside the clock skew). A sender "
                "retries `relay key id mismatch`, `missing relay key id` and `relay timestamp outside allowed "
                "clock skew`: a later attempt, signed anew, may pass."
            ),
            404: _refusal("This gateway accepts no relayed events (no `remote_ingress`)."),
            413: _refusal(
                "The body is larger than `remote_ingress.max_body_size`, or the allowed baggage (or an entry step's "
                "claims on it) would pass the 1 MiB context cap: then `bytes_actual` and `bytes_limit` say by how much."
            ),
            422: _refusal("The peer may not send this event type (`peers[].accept`)."),
        },
    )
    def post(self, request: Request, peer: str) -> HttpResponseBase:
        answer = _answer(request._request, DEFAULT_LISTEN_PATH, peer)
        if answer is None:
            return not_found(request._request)
        return Response(answer.body, status=answer.status)


@csrf_exempt
def configured_ingress(request: HttpRequest, prefix: str, peer: str) -> JsonResponse:
    """A `listen_path` of the operator's choosing; anything else is the API's 404."""
    answer = _answer(request, "/" + prefix, peer) if request.method == "POST" else None
    if answer is None:
        return not_found(request)
    return JsonResponse(answer.body, status=answer.status)
