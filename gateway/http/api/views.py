"""The HTTP API agents drive (spec 000 "API Reference", §9). Every view names the scopes it needs
(`scopes`); discovery endpoints are open. Shapes follow the spec's examples."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import DatabaseError
from django.db.models import Count
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import status
from rest_framework.exceptions import ParseError, PermissionDenied, Throttled, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gateway import intake
from gateway.config.errors import ConfigError
from gateway.config.frozen import thaw
from gateway.http.api import serializers as shapes
from gateway.http.api.auth import RESULTS, sees_results, shaped
from gateway.http.api.errors import Missing, config_unavailable, database_unavailable
from gateway.http.api.parsers import TRIGGER_PARSERS
from gateway.http.api.serializers import errors
from gateway.http.api.syncgate import Busy, caller_gone, sync_slot
from gateway.http.landing import PAGE_HEADERS, LandingPage, landing_context
from gateway.intake.events import SyncRefused, pipeline_entries, run_synchronously, sync_timeout
from gateway.intake.trees import CallerGone
from gateway.logs import logger
from gateway.plugins.registry import PluginInstance
from gateway.reports import (
    MAX_LOGS,
    find_logs,
    health_status,
    job_read,
    normalise_status,
    parse_rfc3339,
    queue_status,
    ts,
)
from gateway.reports.skills import command_scopes, skills
from gateway.runtime import RUNTIME, Runtime, uptime_seconds
from gateway.version import entry_point, gateway_version
from ledger.models import Job, JobLog, WorkerInstance
from ledger.states import JobStatus
from ledger.storable import NOT_STORABLE, storable_text
from ledger.submitters import Submitter

OPEN = None  # `scopes` answer for endpoints anyone may call

log = logger("api")


class Endpoint(APIView):
    """Base: `scopes(request)` says which scopes (any one) the call needs, or OPEN: `needs`, with
    the route's parameters filled in (`{name}:ro`). OpenAPI lists `needs` as each operation's
    security (gateway/http/api/openapi.py)."""

    needs: Sequence[str] | None = ("*",)

    def scopes(self, request: Request) -> Sequence[str] | None:
        if self.needs is None:
            return None
        return tuple(scope.format(**self.kwargs) for scope in self.needs)

    @property
    def runtime(self) -> Runtime:
        return RUNTIME.get()


def body_payload(request: Request) -> dict[str, Any]:
    data = request.data if isinstance(request.data, dict) else None
    if data is None:
        raise ParseError('the body must be a JSON object such as {"payload": {...}}')
    payload = data.get("payload", {})
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise ValidationError({"payload": "must be a JSON object"})
    return payload


def plugin_or_404(runtime: Runtime, name: str) -> PluginInstance:
    instance = runtime.registry.instances.get(name)
    if instance is None:
        raise Missing("plugin not found", f"no loaded plugin named {name!r}")
    return instance


# -- OpenAPI annotations (drf-spectacular): what each operation takes and every answer it gives.
# Each operation names its own description so the `Endpoint` docstring does not leak into them.


def path_param(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, OpenApiTypes.STR, OpenApiParameter.PATH, description=description)


def query_param(name: str, schema: dict[str, Any], description: str) -> OpenApiParameter:
    return OpenApiParameter(name, schema, OpenApiParameter.QUERY, description=description)


STATUS_FILTER = query_param(
    "status",
    {"type": "string", "enum": [*JobStatus.values, "pending", "ok", "error"]},
    "Job status; `pending`, `ok` and `error` are aliases of `queued`, `succeeded` and `failed`.",
)
EXACT_FILTERS = [
    query_param(name, {"type": "string"}, f"Exact `{name}` to match.") for name in ("plugin", "command", "submitted_by")
]


# -- discovery (open) ------------------------------------------------------------------------


ROOT_ANSWERS = "The discovery document (JSON), or for `text/html` the landing page."


class Root(Endpoint):
    """The discovery document for agents; for a browser (`Accept: text/html`), the landing page
    (gateway/http/landing.py). JSON comes first: `*/*`, no Accept, `application/json` or
    `?format=json` get the document, and so does a tie (`application/json, text/html`)."""

    needs = OPEN
    renderer_classes = [JSONRenderer, LandingPage]

    @extend_schema(
        operation_id="root",
        tags=["discovery"],
        summary="Discovery index",
        description="Where to find health, skills, plugins and the OpenAPI document. Open. A browser asking for "
        "`text/html` gets the landing page instead: links to the console, the dashboard and these documents.",
        responses={
            (200, "application/json"): OpenApiResponse(shapes.RootSerializer, description=ROOT_ANSWERS),
            (200, "text/html"): OpenApiResponse(OpenApiTypes.STR, description=ROOT_ANSWERS),
            # Errors are JSON whatever the Accept (finalize_response).
            **{
                (code, "application/json"): answer
                for code, answer in errors(401, meaning={404: "`format` is neither `json` nor `html`."}).items()
            },
        },
    )
    def get(self, request: Request) -> Response:
        document = {
            "name": "Ductile Gateway",
            "description": "Lightweight, open-source integration engine for the agentic era.",
            "version": gateway_version(),
            "uptime_seconds": uptime_seconds(),
            "discovery": {
                "health": "/healthz",
                "skills": "/skills",
                "plugins": "/plugins",
                "openapi": "/openapi.json",
                "ai_plugin": "/.well-known/ai-plugin.json",
            },
        }
        if isinstance(request.accepted_renderer, LandingPage):
            page = landing_context(request._request, document, *health_or_refusal())
            return Response(page, headers=PAGE_HEADERS)
        return Response(document)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(response, "exception", False):
            # An error is JSON whatever was asked for (gateway/http/api/errors.py), a browser's refused token too.
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


class Health(Endpoint):
    needs = OPEN

    @extend_schema(
        operation_id="healthz",
        tags=["discovery"],
        summary="Health",
        description="Uptime, queue depth (queued and running jobs), loaded plugins, open circuits, the plugins "
        "with queued jobs no live worker node serves, live workers, the config directory, the `ductile` command "
        "the gateway runs as, and the version. Open.",
        responses={200: shapes.HealthSerializer, **errors(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(health(self.runtime))


def health(runtime: Runtime) -> dict[str, Any]:
    """`/healthz`'s answer, which the landing page shows too."""
    workers = WorkerInstance.objects.heartbeating(timezone.now(), runtime.config.service.lease_ttl).workers().count()
    return {
        **health_status(runtime, uptime_seconds()),
        "workers": workers,
        "config_path": str(runtime.config.config_dir),
        "binary_path": entry_point(),
        "version": gateway_version(),
    }


def health_or_refusal() -> tuple[dict[str, Any] | None, str | None]:
    """`/healthz`'s answer, or the 503 it would give instead, in its words: the config does not
    load, the database cannot be read."""
    try:
        return health(RUNTIME.get()), None
    except ConfigError as exc:
        refusal = config_unavailable(exc)
    except DatabaseError as exc:
        refusal = database_unavailable(exc, writing=False)
    return None, str(refusal.data["error"])


class Plugins(Endpoint):
    needs = OPEN

    @extend_schema(
        operation_id="plugins",
        tags=["discovery"],
        summary="List plugins",
        description="Every loaded plugin with its command names. Open.",
        responses={200: shapes.PluginListSerializer, **errors(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(
            {
                "plugins": [
                    {
                        "name": name,
                        "version": inst.manifest.version,
                        "description": inst.manifest.description,
                        "commands": list(inst.manifest.commands),
                    }
                    for name, inst in sorted(self.runtime.registry.instances.items())
                ]
            }
        )


class PluginDetail(Endpoint):
    needs = ("plugin:catalog:ro", "{name}:ro")

    @extend_schema(
        operation_id="plugin",
        tags=["plugins"],
        summary="Describe a plugin",
        description="The plugin's manifest: version, protocol and every command with its type and schemas. "
        "Needs `plugin:catalog:ro` or `{name}:ro` (`plugin:ro`, `plugin:rw`, `{name}:rw` and `*` grant them).",
        parameters=[path_param("name", "A loaded plugin (instance) name.")],
        responses={200: shapes.PluginDetailSerializer, **errors(401, 403, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        inst = plugin_or_404(self.runtime, name)
        return Response(
            {
                "name": name,
                "uses": inst.config.uses,
                "version": inst.manifest.version,
                "description": inst.manifest.description,
                "protocol": inst.manifest.protocol,
                "commands": [
                    {
                        "name": c.name,
                        "type": c.type,
                        "description": c.description,
                        "input_schema": thaw(c.input_schema) if c.input_schema is not None else None,
                        "output_schema": thaw(c.output_schema) if c.output_schema is not None else None,
                    }
                    for c in inst.manifest.commands.values()
                ],
            }
        )


class Skills(Endpoint):
    needs = OPEN

    @extend_schema(
        operation_id="skills",
        tags=["discovery"],
        summary="List skills",
        description="Every plugin command (endpoint, scopes, input schema, whether it mutates state, is "
        "idempotent, is safe to retry) and callable pipeline (trigger, mode, steps). Open.",
        responses={200: shapes.SkillListSerializer, **errors(401)},
    )
    def get(self, request: Request) -> Response:
        return Response({"skills": skills(self.runtime)})


class AiPlugin(Endpoint):
    needs = OPEN

    @extend_schema(
        operation_id="ai_plugin",
        tags=["discovery"],
        summary="AI plugin manifest",
        description="OpenAI-style discovery manifest pointing at /openapi.json. Open.",
        responses={200: shapes.AiPluginSerializer, **errors(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(
            {
                "schema_version": "v1",
                "name_for_human": "Ductile Gateway",
                "name_for_model": "ductile",
                "description_for_human": "Integration gateway for triggering plugins and pipelines.",
                "description_for_model": (
                    "Discover and invoke plugins. Fetch /openapi.json for the full spec, or "
                    "/plugin/{name}/openapi.json for a single plugin. Invoke commands via "
                    "POST /plugin/{name}/{command}; start pipelines via POST /pipeline/{name}; "
                    "list both at /skills."
                ),
                "auth": {"type": "bearer"},
                "api": {"type": "openapi", "url": "/openapi.json"},
            }
        )


# -- triggers ----------------------------------------------------------------------------------


class PluginTrigger(Endpoint):
    # What OpenAPI lists for the generic operation; `scopes` picks by the command's type.
    needs = ("plugin:ro", "{plugin}:ro", "plugin:rw", "{plugin}:rw")
    parser_classes = TRIGGER_PARSERS

    def scopes(self, request: Request) -> Sequence[str]:
        name, command = self.kwargs["plugin"], self.kwargs["command"]
        instance = self.runtime.registry.instances.get(name)
        spec = instance.command(command) if instance else None
        return command_scopes(name, spec.type if spec else "write")

    @extend_schema(
        operation_id="plugin_trigger",
        tags=["plugins"],
        summary="Invoke a plugin command",
        description="Enqueues exactly one job, bypassing pipeline routing; for `handle` the payload is wrapped "
        "as an `api.trigger` event. A `read` command needs `plugin:ro` or `{plugin}:ro`, any other "
        "`plugin:rw` or `{plugin}:rw` (or `*`). Each discovered command also has its own operation, "
        "with its input schema, at `/plugin/{plugin}/{command}`.",
        parameters=[path_param("plugin", "A loaded plugin name."), path_param("command", "One of its commands.")],
        request=shapes.PluginTriggerRequestSerializer,
        responses={202: shapes.TriggerAcceptedSerializer, **errors(400, 401, 403, 404, 415, 503)},
    )
    def post(self, request: Request, plugin: str, command: str) -> Response:
        runtime = self.runtime
        try:
            intake.resolve(runtime, plugin, command)  # a missing target is a 404 before the body is read
        except intake.Refused as exc:
            # The original's words, for its clients; ours (why it cannot run, which commands it has) beside.
            words = "command not supported by plugin" if plugin in runtime.registry.instances else "plugin not found"
            raise Missing(words, str(exc)) from None
        payload = body_payload(request)
        spec = intake.job(runtime, Submitter.API, plugin, command, payload, dedupe_key=request.data.get("dedupe_key"))
        result = intake.submit(runtime, [spec])[0]
        body: dict[str, Any] = {"job_id": result.job_id, "status": result.status, "plugin": plugin, "command": command}
        if result.deduplicated:
            body["deduplicated"] = True
        return Response(body, status=status.HTTP_202_ACCEPTED)


class PipelineTrigger(Endpoint):
    needs = ("plugin:rw",)
    parser_classes = TRIGGER_PARSERS

    @extend_schema(
        operation_id="pipeline_trigger",
        tags=["pipelines"],
        summary="Start a pipeline",
        description="Asynchronous pipelines (and `?async=true`) answer 202 with the root jobs. Synchronous ones "
        "wait for the whole tree: 200 with the terminal step's result and the tree, or 202 with "
        "`timeout_exceeded` once the timeout (capped by `api.max_sync_timeout`) passes; more than one "
        "entry dispatch is refused with 400. Once the root job is recorded, a database outage never "
        "answers 503: the wait reads again until the timeout. Needs `plugin:rw` (or `*`).",
        parameters=[
            path_param("name", "A callable (non-hook) pipeline."),
            query_param("async", {"type": "boolean"}, "Answer 202 at once even for a synchronous pipeline."),
        ],
        request=shapes.PipelineTriggerRequestSerializer,
        responses={
            200: OpenApiResponse(shapes.PipelineRunSerializer, description="A synchronous pipeline finished."),
            202: OpenApiResponse(
                PolymorphicProxySerializer(
                    component_name="PipelineAccepted",
                    serializers=[shapes.PipelineQueuedSerializer, shapes.PipelineRunSerializer],
                    resource_type_field_name=None,
                ),
                description="Queued (asynchronous), or still running at the timeout (synchronous); also when "
                "the database could not be read until the timeout, with the started jobs to follow.",
            ),
            **errors(400, 401, 403, 404, 415, 429, 503),
            413: OpenApiResponse(
                shapes.ContextTooLargeSerializer,
                description="An entry step's baggage claims would make the pipeline's context larger than its "
                "cap; nothing was enqueued.",
            ),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        runtime = self.runtime
        pipeline = runtime.pipelines.pipelines.get(name)
        if pipeline is None or pipeline.is_hook:
            raise Missing("pipeline not found", f"no callable pipeline named {name!r}")
        payload = body_payload(request)
        force_async = str(request.query_params.get("async", "")).lower() in ("1", "true", "yes")
        if pipeline.execution_mode != "synchronous" or force_async:
            ids = intake.submit_ids(runtime, pipeline_entries(runtime, name, payload, submitter=Submitter.API))
            body = {"job_id": ids[0] if ids else None, "job_ids": ids, "status": "queued"}
            return Response({**body, "plugin": "pipeline", "command": name}, status=status.HTTP_202_ACCEPTED)
        limit = runtime.config.api.max_concurrent_sync
        cap = runtime.config.api.max_sync_timeout
        timeout = sync_timeout(pipeline, None, cap)
        try:
            with sync_slot(runtime.config.state_path.parent / "sync-slots", limit):
                outcome = run_synchronously(
                    runtime, name, payload, submitter=Submitter.API, timeout=timeout, gone=caller_gone(request.META)
                )
        except CallerGone:
            # Nobody reads this answer: nginx's 499 for the server's own record.
            log.info("synchronous caller of pipeline %s went away; its slot is free, its jobs run on", name)
            return Response({"error": "the caller closed its connection"}, status=499)
        except Busy:
            raise Throttled(
                detail=f"{limit} synchronous callers are already waiting (api.max_concurrent_sync)"
            ) from None
        except SyncRefused as exc:
            raise ValidationError(str(exc) + "; add ?async=true") from exc
        code = status.HTTP_200_OK if outcome.complete else status.HTTP_202_ACCEPTED
        return Response(outcome.report(), status=code)


# -- jobs ------------------------------------------------------------------------------------


def job_or_404(job_id: str) -> Job:
    job = Job.objects.filter(pk=job_id).first() if storable_text(job_id) else None
    if job is None:
        raise Missing("job not found", f"no job with id {job_id!r}")
    return job


JOB_ID = path_param("job_id", "A job id, as returned by the triggers and the job queries.")


class JobDetail(Endpoint):
    needs = ("jobs:status:ro",)

    @extend_schema(
        operation_id="job",
        tags=["jobs"],
        summary="Job status and result",
        description="The job and the latest attempt's result. Needs `jobs:status:ro` (`jobs:ro`, `jobs:rw` and `*` "
        "grant it); `result` and `last_error` are shown only with `jobs:result:ro` too.",
        parameters=[JOB_ID],
        responses={200: shapes.JobSerializer, **errors(401, 403, 404)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = job_or_404(job_id)
        return Response(shaped(request, [job_read(job)])[0])


class JobTree(Endpoint):
    needs = ("jobs:tree:ro",)

    @extend_schema(
        operation_id="job_tree",
        tags=["jobs"],
        summary="Job tree",
        description="The job and every job it led to, parents before children, each with its latest result. "
        "Needs `jobs:tree:ro` (`jobs:ro`, `jobs:rw` and `*` grant it); `result` and `last_error` are shown only "
        "with `jobs:result:ro` too.",
        parameters=[JOB_ID],
        responses={200: shapes.JobSerializer(many=True), **errors(401, 403, 404)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        job_or_404(job_id)
        return Response(shaped(request, (job_read(j) for j in Job.objects.tree([job_id]))))


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: f"must be an integer, got {raw!r}"}) from None
    if not low <= value <= high:
        raise ValidationError({name: f"must be between {low} and {high}"})
    return value


def text_param(request: Request, name: str) -> str | None:
    """A query parameter that filters a text column."""
    value = request.query_params.get(name)
    if value is not None and not storable_text(value):
        raise ValidationError({name: NOT_STORABLE})  # PostgreSQL refuses them even as parameters
    return value


def status_param(request: Request) -> str | None:
    raw = request.query_params.get("status")
    if not raw:
        return None
    try:
        return normalise_status(raw)
    except ValueError as exc:
        raise ValidationError({"status": str(exc)}) from None


class Jobs(Endpoint):
    needs = ("jobs:status:ro",)

    @extend_schema(
        operation_id="jobs",
        tags=["jobs"],
        summary="List jobs",
        description="Jobs newest first, filtered. Needs `jobs:status:ro` (`jobs:ro`, `jobs:rw` and `*` grant it).",
        parameters=[
            *EXACT_FILTERS,
            STATUS_FILTER,
            query_param("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}, "Rows at most."),
        ],
        responses={200: shapes.JobListSerializer, **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        rows = Job.objects.order_by("-created_at")
        for name in ("plugin", "command", "submitted_by"):
            if value := text_param(request, name):
                rows = rows.filter(**{name: value})
        if (wanted := status_param(request)) is not None:
            rows = rows.filter(status=wanted)
        limit = int_param(request, "limit", 50, 1, 1000)
        jobs = [
            {
                "job_id": j.id,
                "plugin": j.plugin,
                "command": j.command,
                "status": j.status,
                "attempt": j.attempt,
                "submitted_by": j.submitted_by,
                "parent_job_id": j.parent_job_id,
                "created_at": ts(j.created_at),
                "started_at": ts(j.started_at),
                "completed_at": ts(j.completed_at),
            }
            for j in rows[:limit]
        ]
        return Response({"jobs": jobs, "total": rows.count()})


def time_param(request: Request, name: str) -> Any:
    raw = request.query_params.get(name)
    if not raw:
        return None
    try:
        return parse_rfc3339(raw)
    except ValueError as exc:
        raise ValidationError({name: str(exc)}) from None


class JobLogs(Endpoint):
    needs = ("jobs:logs:ro",)

    @extend_schema(
        operation_id="job_logs",
        tags=["jobs"],
        summary="Query job logs",
        description="Finished attempts, newest first, filtered. Needs `jobs:logs:ro` (`jobs:ro`, `jobs:rw` and `*` "
        "grant it); `result`, `last_error` and `stderr` are shown, and `query` (which searches them) is allowed, "
        "only with `jobs:result:ro` too.",
        parameters=[
            query_param("job_id", {"type": "string"}, "Exact job id to match."),
            *EXACT_FILTERS,
            STATUS_FILTER,
            query_param("from", {"type": "string", "format": "date-time"}, "Completed at or after (RFC 3339)."),
            query_param("to", {"type": "string", "format": "date-time"}, "Completed at or before (RFC 3339)."),
            query_param("query", {"type": "string"}, "Text to find in last_error, stderr or the result."),
            query_param(
                "limit", {"type": "integer", "minimum": 1, "maximum": MAX_LOGS, "default": 50}, "Rows at most."
            ),
            query_param("include_result", {"type": "boolean"}, "Include each attempt's full result."),
        ],
        responses={200: shapes.JobLogListSerializer, **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        q = request.query_params
        filters = {k: text_param(request, k) for k in ("job_id", "plugin", "command", "submitted_by", "query")}
        filters["status"] = status_param(request)
        if filters["query"] and not sees_results(request):
            # A search of what plugins wrote would tell, match by match, what the token may not read.
            raise PermissionDenied(f"token lacks scope: `query` searches results, errors and stderr; needs {RESULTS}")
        include = str(q.get("include_result", "")).lower() in ("1", "true", "yes")
        try:
            entries, total = find_logs(
                filters,
                start=time_param(request, "from"),
                end=time_param(request, "to"),
                limit=int_param(request, "limit", 50, 1, MAX_LOGS),
                include_result=include,
            )
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc
        return Response({"logs": shaped(request, entries), "total": total})


# -- operations ------------------------------------------------------------------------------


class AnalyticsQueue(Endpoint):
    @extend_schema(
        operation_id="analytics_queue",
        tags=["analytics"],
        summary="Queue metrics",
        description="Jobs per status, queue depth, retries waiting and live workers. Needs `*`.",
        responses={200: shapes.QueueStatusSerializer, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(queue_status(lease_ttl=self.runtime.config.service.lease_ttl))


class AnalyticsSummary(Endpoint):
    @extend_schema(
        operation_id="analytics_summary",
        tags=["analytics"],
        summary="Last 24 hours",
        description="Finished attempts per status over the last 24 hours. Needs `*`.",
        responses={200: shapes.SummarySerializer, **errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        since = timezone.now() - timedelta(hours=24)
        counts = dict(
            JobLog.objects.filter(completed_at__gte=since).values_list("status").annotate(n=Count("id")).order_by()
        )
        return Response({"window": "24h", "stats": {s: counts.get(s, 0) for s in JobStatus.values if s != "queued"}})
