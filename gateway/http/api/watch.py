"""`GET /system/watch`: one snapshot of the live figures, what `ductile system watch --api-url`
draws and the web dashboard streams (gateway/reports/live.py builds it, for all three)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from gateway.http.api.serializers import errors
from gateway.http.api.views import Endpoint
from gateway.reports import live


class SystemWatch(Endpoint):
    """Queue counts, live workers, running jobs with elapsed time, jobs ended and failed per minute
    over the last hour, per-plugin p50/p95/p99 from the stopwatch, circuit breakers, the next
    scheduled runs, the latest failures, each pipeline's last run and the latest events. Rebuilt
    when the ledger moves, at most twice a second, so polling it is cheap; cheaper still with the
    `ETag` of the last answer in `If-None-Match`: 304 with no body while nothing moved."""

    needs = ("jobs:ro",)

    @extend_schema(
        operation_id="system_watch",
        tags=["operations"],
        summary="The live figures `system watch` and the dashboard show: queue, running, throughput, latency, …",
        parameters=[
            OpenApiParameter(
                "If-None-Match",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="The ETag of the snapshot you have: 304 if it is still the latest.",
            )
        ],
        responses={200: OpenApiTypes.OBJECT, 304: OpenApiResponse(description="Not modified"), **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        snapshot = live.LIVE_FIGURES.get(self.runtime)
        # Each process builds its own snapshots, so the time it built one names it.
        etag = f'"{snapshot["generated_at"]}"'
        if request.headers.get("If-None-Match") == etag:
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        return Response(snapshot, headers={"ETag": etag})
