"""Operations endpoints (spec 000 "API Reference" §10 and §12, idiom 8 "Diagnostics"): the
redacted config, stopwatch percentiles, the topology graph, the live event stream, reload, doctor,
selfcheck and the cluster's nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.http import HttpResponse
from django.http.response import HttpResponseBase
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from gateway.config.errors import ConfigError
from gateway.daemon.control import NotRunning, reload_gateway
from gateway.daemon.supervisor import listener_changes
from gateway.http import eventstream
from gateway.http.api.errors import Missing
from gateway.http.api.serializers import NodesSerializer, ReloadRefusedSerializer, errors
from gateway.http.api.views import Endpoint, int_param, path_param, query_param, time_param
from gateway.http.streamseats import Refusal
from gateway.operations.doctor import ERROR as DOCTOR_ERROR
from gateway.operations.doctor import diagnose
from gateway.reports import events, schedule_entries, ts
from gateway.reports.nodes import nodes_report
from gateway.reports.percentiles import summary
from gateway.reports.redaction import served_config
from gateway.reports.topology import topology
from gateway.runtime import RUNTIME, build_runtime
from ledger.models import JobStopwatch


class ConfigView(Endpoint):
    """The reconciled config with secret-like keys redacted at any depth, API token values and
    tokens.yaml keys omitted, plus `compiled_routes` keyed by pipeline and the pipelines'
    fingerprint."""

    @extend_schema(
        operation_id="config_view",
        tags=["operations"],
        summary="The reconciled config, secrets redacted, with compiled routes per pipeline",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(served_config(self.runtime))


# -- stopwatch -------------------------------------------------------------------------------

DEFAULT_SAMPLE, MAX_SAMPLE = 1000, 100_000


class Stopwatch(Endpoint):
    """p50/p95/p99 and max of a plugin's time (`dur_ns`) and the gateway's time around it
    (`runtime_pre_ns + runtime_post_ns`) over its latest invocations (`?limit=`, default 1000),
    optionally one `?command=` and those since `?since=` (RFC 3339). Nanoseconds; nearest-rank.
    Needs `jobs:status:ro` (`jobs:ro`, `jobs:rw` and `*` grant it), as the original's does."""

    needs = ("jobs:status:ro",)

    @extend_schema(
        operation_id="stopwatch",
        tags=["operations"],
        summary="Plugin and gateway time percentiles for one plugin",
        parameters=[
            path_param("plugin", "A configured plugin, or one with recorded invocations."),
            query_param("command", {"type": "string"}, "Only this command."),
            query_param("since", {"type": "string", "format": "date-time"}, "Only invocations since (RFC 3339)."),
            query_param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_SAMPLE}, "Newest N invocations."),
        ],
        responses={200: OpenApiTypes.OBJECT, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, plugin: str) -> Response:
        command = request.query_params.get("command") or None
        since = time_param(request, "since")
        limit = int_param(request, "limit", DEFAULT_SAMPLE, 1, MAX_SAMPLE)
        rows = JobStopwatch.objects.filter(plugin=plugin)
        if plugin not in self.runtime.config.plugins and not rows.exists():
            raise Missing("plugin not found", f"no plugin named {plugin!r} is configured or has stopwatch records")
        if command:
            rows = rows.filter(command=command)
        if since is not None:
            rows = rows.filter(created_at__gte=since)
        columns = ("dur_ns", "runtime_pre_ns", "runtime_post_ns", "created_at")
        sample = list(rows.order_by("-created_at", "-id").values_list(*columns)[:limit])
        return Response(
            {
                "plugin": plugin,
                "command": command,
                "since": ts(since),
                "limit": limit,
                "count": len(sample),
                "percentile_method": "nearest-rank",
                "oldest": ts(min((r[3] for r in sample), default=None)),
                "newest": ts(max((r[3] for r in sample), default=None)),
                "plugin_time_ns": summary([r[0] for r in sample]),
                "gateway_time_ns": summary([r[1] + r[2] for r in sample]),
            }
        )


class Topology(Endpoint):
    """The plugin → event → plugin graph from `routes:`, pipelines and manifests' `values.emit`,
    as nodes and edges and as a Mermaid flowchart."""

    needs = ("plugin:ro",)

    @extend_schema(
        operation_id="topology",
        tags=["operations"],
        summary="The plugin -> event -> plugin graph, with a Mermaid rendering",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(topology(self.runtime))


# -- events ----------------------------------------------------------------------------------


class JsonWhateverIsAccepted(BaseContentNegotiation):
    """EventSource sends `Accept: text/event-stream`, which no DRF renderer offers: DRF would answer
    406 before the view runs. The stream bypasses renderers; refusals (401, 403, 400) are JSON."""

    def select_parser(self, request: Request, parsers: Sequence[BaseParser]) -> BaseParser | None:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: Sequence[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], str(renderers[0].media_type)


STREAM_REFUSALS = {
    429: "This token already has `api.max_streams_per_token` streams open; close one, or retry later.",
    503: "The server has `api.max_streams` streams open; retry after `Retry-After` seconds.",
}


class StreamsBusy(APIException):
    """A stream refused for its cap: 429 (the holder's share) or 503 (the server's), with Retry-After."""

    wait = 5

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.status_code = refusal.status


class Events(Endpoint):
    """Server-Sent Events of the live event stream (`id`, `event` = type, `data` = the row as JSON),
    resumable: send `Last-Event-ID` (or `?last_event_id=`) to get the rows after that id first.
    `?types=a,b` keeps only those event types. `?token=` is accepted here, for EventSource."""

    needs = ("events:ro",)
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonWhateverIsAccepted

    @extend_schema(
        operation_id="events_stream",
        tags=["operations"],
        summary="Server-Sent Events of the live event stream (resumable with Last-Event-ID)",
        parameters=[
            query_param("types", {"type": "string"}, "Comma-separated event types to keep."),
            query_param("last_event_id", {"type": "string"}, "Resume after this id (the header wins)."),
            query_param("token", {"type": "string"}, "The bearer token, for clients that cannot send headers."),
        ],
        responses={
            (200, "text/event-stream"): OpenApiTypes.STR,
            **errors(400, 401, 403, meaning=STREAM_REFUSALS),
        },
    )
    def get(self, request: Request) -> HttpResponseBase:
        # The header wins: a browser reconnecting on its own sends it with the original URL,
        # whose `?last_event_id=` is older.
        raw = request.META.get("HTTP_LAST_EVENT_ID") or request.query_params.get("last_event_id")
        latest = events.latest_id()
        # An id past the newest is a ledger this client saw and this one never had (restored from
        # an older backup, or another gateway's): resuming after it would wait for ids that were
        # already used elsewhere, silently. The stream starts at the newest instead, and says so.
        after = min(_event_id(raw), latest) if raw else latest
        types = frozenset(t.strip() for t in request.query_params.get("types", "").split(",") if t.strip())
        feed = eventstream.EventFeed(events.EventCursor(after), types)
        opened = eventstream.open_stream(request.META, feed, f"token {request.user}", self.runtime.config)
        if isinstance(opened, Refusal):
            raise StreamsBusy(opened)
        return opened

    def head(self, request: Request) -> HttpResponse:
        """The stream's headers only. Servers still drain the body of a HEAD answer without sending
        it, so an endless stream would never hit a closed socket and would hold its thread forever."""
        return eventstream.stream_headers(HttpResponse(content_type="text/event-stream"))


def _event_id(raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValidationError({"Last-Event-ID": f"must be an event id (a non-negative integer), got {raw!r}"})
    return value


# -- reload ----------------------------------------------------------------------------------


class SystemDoctor(Endpoint):
    """`system doctor` over HTTP (idiom 8, "Diagnostics"): what loads but cannot work as meant.
    `healthy` and `findings` as `system doctor --json` prints them; `ok`, `captured_at` and
    `checks` ({name, status: fail | warn | ok, detail, field}) in the shape the original's
    /system/doctor and /system/selfcheck share, so a client of either reads both."""

    @extend_schema(
        operation_id="system_doctor",
        tags=["operations"],
        summary="Diagnose the loaded config: skipped plugins, alias and route loops, unknown scopes, unused plugins; "
        "plugins with queued jobs no live node runs",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        findings = diagnose(self.runtime, nodes_report(timezone.now(), self.runtime.config.service.lease_ttl))
        healthy = not any(f.severity == DOCTOR_ERROR for f in findings)
        return Response(
            {
                "healthy": healthy,
                "findings": [f.as_dict() for f in findings],
                "ok": healthy,
                "captured_at": ts(timezone.now()),
                "checks": [f.as_check() for f in findings],
            }
        )


class SystemNodes(Endpoint):
    """The cluster's worker nodes (`system status` lists them too) and the plugins with queued jobs
    that no live node claims."""

    needs = ("jobs:status:ro",)  # what /system/watch shows of the workers, under the finer read scope

    @extend_schema(
        operation_id="system_nodes",
        tags=["operations"],
        summary="Worker nodes: host, pid, group, version, slots, last heartbeat, live or lost; unserved plugins",
        description="Each worker daemon of the cluster (live, or lost within the last day), and each plugin with "
        "queued jobs that no live node claims (its group or `--plugins` leave it out, or no node is live). "
        "Needs `jobs:status:ro` (`jobs:ro`, `jobs:rw` and `*` grant it).",
        responses={200: NodesSerializer, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(nodes_report(timezone.now(), self.runtime.config.service.lease_ttl).as_dict())


class SystemSelfcheck(Endpoint):
    """`system selfcheck` asked of the serving gateway (idiom 8, "Diagnostics"): the config on disk
    loads, and the PID lock is this gateway's own; the database checks are skipped while it runs
    (gateway/operations/selfcheck.py), in the shape `system selfcheck --json` prints."""

    @extend_schema(
        operation_id="system_selfcheck",
        tags=["operations"],
        summary="The selfcheck invariants as the running gateway sees them (database checks skipped while it runs)",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        # Imported here: at module level every API worker would load django-q2's scheduler and the
        # backup code with it (52 modules) for an endpoint asked now and then.
        from gateway.operations.selfcheck import report, selfcheck

        return Response(report(selfcheck(serving=True)))


class SystemReload(Endpoint):
    """Reload the configuration in every gateway process: the files on disk are loaded here first
    (an invalid config keeps the running one and is answered 409, as the original answers a refused
    reload, with every problem: file, line, key); then the `system start` supervisor (found by its
    PID file) is signalled, which loads them again and hands the result to every process it runs,
    and starts, stops or moves the listeners (API, webhooks) whose address the reload changed
    (`listeners` says which). Without a supervisor, this API process alone takes the new config."""

    @extend_schema(
        operation_id="system_reload",
        tags=["operations"],
        summary="Reload the configuration in every gateway process (an invalid one is refused, the old kept)",
        request=None,
        responses={
            200: OpenApiTypes.OBJECT,
            **errors(401, 403),
            409: OpenApiResponse(
                ReloadRefusedSerializer,
                description="The config on disk does not load: the running one is kept; `problems` lists "
                "every problem with its file, line and key.",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        assert RUNTIME.config_dir is not None  # set when this process loaded its config
        try:
            new = build_runtime(RUNTIME.config_dir)
        except ConfigError as exc:
            body: dict[str, Any] = {
                "error": "configuration invalid; the running configuration is kept: "
                + "; ".join(str(p) for p in exc.problems),
                "problems": [p.as_dict() for p in exc.problems],
            }
            return Response(body, status=status.HTTP_409_CONFLICT)
        # Listeners added, dropped or moved: the supervisor starts, stops or moves them (a
        # gunicorn keeps the address it was started with through a reload).
        changes = listener_changes(RUNTIME.get(), new)
        try:
            supervisor: int | None = reload_gateway(new.config)
            scope = f"every gateway process (supervisor pid {supervisor} signalled)"
            said = "; ".join(changes)
            listening = f" {said[:1].upper()}{said[1:]}." if changes else ""
        except NotRunning as exc:
            RUNTIME.install(new)
            supervisor, scope = None, f"this API process only ({exc})"
            listening = (
                f" Not done without `system start`, which runs the listeners: {'; '.join(changes)}." if changes else ""
            )
        return Response(
            {
                "status": "ok",
                "reloaded_at": ts(new.loaded_at),
                "supervisor_pid": supervisor,
                "listeners": changes,
                "message": f"Configuration reloaded: {scope}.{listening}",
            }
        )


# -- scheduler -------------------------------------------------------------------------------


class SchedulerJobs(Endpoint):
    """Every schedule entry, as `system scheduler --json` lists them: the config's definition
    (`mode`/`kind`, `when`, `timezone`) and the scheduler's state (`status`, `reason`,
    `next_run_at`, last firing and success). Entries no longer configured come last."""

    needs = ("jobs:status:ro",)  # the original's; jobs:ro grants it

    @extend_schema(
        operation_id="scheduler_jobs",
        tags=["operations"],
        summary="Every schedule entry with its status and next run (what `system scheduler --json` shows)",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response({"jobs": schedule_entries(self.runtime, timezone.now())})
