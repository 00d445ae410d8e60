"""`GET /system/watch`: one snapshot of the live figures, what `ductile system watch --api-url`
draws and the web dashboard streams (gateway/live.py builds it, for all three)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from gateway.api.serializers import errors
from gateway.api.views import Endpoint
from gateway.live import LIVE_FIGURES


class SystemWatch(Endpoint):
    """Queue counts, live workers, running jobs with elapsed time, jobs ended and failed per minute
    over the last hour, per-plugin p50/p95/p99 from the stopwatch, circuit breakers, the next
    scheduled runs, the latest failures, each pipeline's last run and the latest events. Rebuilt
    when the ledger moves, at most twice a second, so polling it is cheap."""

    needs = ("jobs:ro",)

    @extend_schema(
        operation_id="system_watch",
        tags=["operations"],
        summary="The live figures `system watch` and the dashboard show: queue, running, throughput, latency, …",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(LIVE_FIGURES.get(self.runtime))
