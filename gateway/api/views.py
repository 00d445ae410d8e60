"""The HTTP API agents drive (spec 000 "API Reference", §9). Every view names the scopes it needs
(`scopes`); discovery endpoints are open. Shapes follow the spec's examples."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db.models import Count
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError, Throttled, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gateway.config.durations import parse_duration
from gateway.config.frozen import thaw
from gateway.events import SyncRefused, enqueue, pipeline_entries, run_synchronously, sync_timeout
from gateway.plugins.registry import PluginInstance
from gateway.reports import MAX_LOGS, find_logs, job_summary, latest_result, normalise_status, queue_status
from gateway.runtime import RUNTIME, Runtime
from gateway.version import gateway_version
from ledger.models import CircuitBreaker, Job, JobLog, JobSpec
from ledger.states import JobStatus

OPEN = None  # `scopes` answer for endpoints anyone may call


class Endpoint(APIView):
    """Base: `scopes(request)` says which scopes (any one) the call needs, or OPEN."""

    needs: Sequence[str] | None = ("*",)

    def scopes(self, request: Request) -> Sequence[str] | None:
        return self.needs

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
        raise NotFound(f"no loaded plugin named {name!r}")
    return instance


def command_scopes(plugin: str, kind: str) -> tuple[str, ...]:
    """A manifest command's `type` decides the scope: read commands need `ro`, others `rw`."""
    access = "ro" if kind == "read" else "rw"
    return (f"plugin:{access}", f"{plugin}:{access}")


# -- discovery (open) ------------------------------------------------------------------------


class Root(Endpoint):
    needs = OPEN

    def get(self, request: Request) -> Response:
        return Response(
            {
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
        )


_STARTED = timezone.now()


def uptime_seconds() -> int:
    return int((timezone.now() - _STARTED).total_seconds())


class Health(Endpoint):
    needs = OPEN

    def get(self, request: Request) -> Response:
        runtime = self.runtime
        queue = queue_status(lease_ttl=runtime.config.service.lease_ttl)
        return Response(
            {
                "status": "ok",
                "uptime_seconds": uptime_seconds(),
                "queue_depth": queue["queue_depth"],
                "plugins_loaded": len(runtime.registry.instances),
                "plugins_circuit_open": CircuitBreaker.objects.tripped().count(),
                "workers": len(queue["workers"]),
                "config_path": str(runtime.config.config_dir),
                "version": gateway_version(),
            }
        )


class Plugins(Endpoint):
    needs = OPEN

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
    def scopes(self, request: Request) -> Sequence[str]:
        return ("plugin:ro", f"{self.kwargs['name']}:ro")

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

    def get(self, request: Request) -> Response:
        runtime = self.runtime
        skills: list[dict[str, Any]] = []
        for name, inst in sorted(runtime.registry.instances.items()):
            for command in inst.manifest.commands.values():
                skills.append(
                    {
                        "name": f"plugin.{name}.{command.name}",
                        "kind": "plugin",
                        "description": command.description or f"{name}: {command.name}",
                        "endpoint": f"/plugin/{name}/{command.name}",
                        "tier": "READ" if command.type == "read" else "WRITE",
                        "plugin": name,
                        "command": command.name,
                    }
                )
        for pipeline in sorted(runtime.pipelines.pipelines.values(), key=lambda p: p.name):
            if pipeline.is_hook:
                continue  # started by lifecycle signals, not callable
            skills.append(
                {
                    "name": f"pipeline.{pipeline.name}",
                    "kind": "pipeline",
                    "endpoint": f"/pipeline/{pipeline.name}",
                    "pipeline": pipeline.name,
                    "trigger": pipeline.trigger,
                    "execution_mode": "synchronous" if pipeline.execution_mode == "synchronous" else "asynchronous",
                    "timeout_secs": pipeline.timeout,
                }
            )
        return Response({"skills": skills})


class AiPlugin(Endpoint):
    needs = OPEN

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
    def scopes(self, request: Request) -> Sequence[str]:
        name, command = self.kwargs["plugin"], self.kwargs["command"]
        instance = self.runtime.registry.instances.get(name)
        spec = instance.command(command) if instance else None
        return command_scopes(name, spec.type if spec else "write")

    def post(self, request: Request, plugin: str, command: str) -> Response:
        runtime = self.runtime
        instance = plugin_or_404(runtime, plugin)
        if instance.command(command) is None:
            known = ", ".join(instance.manifest.commands)
            raise NotFound(f"plugin {plugin!r} has no command {command!r} (it has: {known})")
        payload = body_payload(request)
        data = request.data
        dedupe_key = data.get("dedupe_key")
        if dedupe_key is not None and not isinstance(dedupe_key, str):
            raise ValidationError({"dedupe_key": "must be a string"})
        spec = JobSpec(
            plugin=plugin,
            command=command,
            submitted_by="api",
            payload=payload,
            dedupe_key=dedupe_key,
            max_attempts=instance.config.retry.max_attempts,
        )
        result = Job.objects.enqueue(spec, default_dedupe_ttl=runtime.config.service.dedupe_ttl)
        body: dict[str, Any] = {"job_id": result.job_id, "status": "queued", "plugin": plugin, "command": command}
        if result.deduplicated:
            body["deduplicated"] = True
        return Response(body, status=status.HTTP_202_ACCEPTED)


class _SyncGate:
    """`api.max_concurrent_sync` callers may wait at once (per API process); the next gets 429."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting = 0

    def enter(self, limit: int) -> bool:
        with self._lock:
            if self.waiting >= limit:
                return False
            self.waiting += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.waiting -= 1


SYNC_GATE = _SyncGate()


class PipelineTrigger(Endpoint):
    needs = ("plugin:rw",)

    def post(self, request: Request, name: str) -> Response:
        runtime = self.runtime
        pipeline = runtime.pipelines.pipelines.get(name)
        if pipeline is None or pipeline.is_hook:
            raise NotFound(f"no pipeline named {name!r}")
        payload = body_payload(request)
        force_async = str(request.query_params.get("async", "")).lower() in ("1", "true", "yes")
        if pipeline.execution_mode != "synchronous" or force_async:
            ids = enqueue(runtime, pipeline_entries(runtime, name, payload, submitted_by="api"))
            body = {"job_id": ids[0] if ids else None, "job_ids": ids, "status": "queued"}
            return Response({**body, "plugin": "pipeline", "command": name}, status=status.HTTP_202_ACCEPTED)
        api = thaw(runtime.config.api)
        limit = int(api.get("max_concurrent_sync") or 10)
        cap = _seconds(api.get("max_sync_timeout"))
        if not SYNC_GATE.enter(limit):
            raise Throttled(detail=f"{limit} synchronous callers are already waiting (api.max_concurrent_sync)")
        try:
            outcome = run_synchronously(
                runtime, name, payload, submitted_by="api", timeout=sync_timeout(pipeline, None, cap)
            )
        except SyncRefused as exc:
            raise ValidationError(str(exc) + "; add ?async=true") from exc
        finally:
            SYNC_GATE.leave()
        code = status.HTTP_200_OK if outcome.complete else status.HTTP_202_ACCEPTED
        return Response(outcome.report(), status=code)


def _seconds(value: Any) -> float | None:
    return None if value in (None, "") else float(parse_duration(value))


# -- jobs ------------------------------------------------------------------------------------


def job_or_404(job_id: str) -> Job:
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"no job with id {job_id!r}")
    return job


class JobDetail(Endpoint):
    needs = ("jobs:ro",)

    def get(self, request: Request, job_id: str) -> Response:
        job = job_or_404(job_id)
        return Response({**job_summary(job), "result": latest_result(job)})


class JobTree(Endpoint):
    needs = ("jobs:ro",)

    def get(self, request: Request, job_id: str) -> Response:
        job_or_404(job_id)
        return Response([{**job_summary(j), "result": latest_result(j)} for j in Job.objects.tree([job_id])])


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


def status_param(request: Request) -> str | None:
    raw = request.query_params.get("status")
    if not raw:
        return None
    try:
        return normalise_status(raw)
    except ValueError as exc:
        raise ValidationError({"status": str(exc)}) from None


class Jobs(Endpoint):
    needs = ("jobs:ro",)

    def get(self, request: Request) -> Response:
        rows = Job.objects.order_by("-created_at")
        for name in ("plugin", "command", "submitted_by"):
            if value := request.query_params.get(name):
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


def ts(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def time_param(request: Request, name: str) -> Any:
    raw = request.query_params.get(name)
    if not raw:
        return None
    parsed = parse_datetime(raw.replace("Z", "+00:00"))
    if parsed is None or parsed.tzinfo is None:
        raise ValidationError({name: f"must be an RFC 3339 timestamp such as 2026-11-21T10:00:00Z, got {raw!r}"})
    return parsed


class JobLogs(Endpoint):
    needs = ("jobs:ro",)

    def get(self, request: Request) -> Response:
        q = request.query_params
        filters = {k: q.get(k) for k in ("job_id", "plugin", "command", "submitted_by", "query")}
        filters["status"] = status_param(request)
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
        return Response({"logs": entries, "total": total})


# -- operations ------------------------------------------------------------------------------


class AnalyticsQueue(Endpoint):
    def get(self, request: Request) -> Response:
        return Response(queue_status(lease_ttl=self.runtime.config.service.lease_ttl))


class AnalyticsSummary(Endpoint):
    def get(self, request: Request) -> Response:
        since = timezone.now() - timedelta(hours=24)
        counts = dict(
            JobLog.objects.filter(completed_at__gte=since).values_list("status").annotate(n=Count("id")).order_by()
        )
        return Response({"window": "24h", "stats": {s: counts.get(s, 0) for s in JobStatus.values if s != "queued"}})
