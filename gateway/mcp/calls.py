"""What each MCP tool and resource does, on the read models and the intake the API and the CLI use:
blocking Django code, run on a worker thread by gateway/mcp/server.py (never on its event loop).

Every write enters through the intake (`gateway.intake`) submitted by `mcp` with the token's name,
so the ledger records an MCP call as it records an API call; every read goes through the read
models that scrub secrets (`gateway.reports`), and is shaped by the caller's scopes as the API
shapes it (`Caller.shaped`). A problem with what was asked is a `ToolError`, answered to the client
as a tool error (`isError`), never as a protocol error or an HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from gateway import intake
from gateway.intake.events import pipeline_entries, pipeline_starts, preview, publish_event
from gateway.mcp.catalogue import Caller, Tool
from gateway.operations import Actor, replay
from gateway.operations.doctor import ERROR as DOCTOR_ERROR
from gateway.operations.doctor import diagnose
from gateway.reports import MAX_LOGS, find_logs, health_status, job_detail, job_read, normalise_status, queue_status
from gateway.reports.nodes import nodes_report
from gateway.reports.redaction import served_config
from gateway.reports.skills import markdown, skills
from gateway.runtime import Runtime, uptime_seconds
from gateway.version import gateway_version
from ledger.models import Job, LostJob
from ledger.states import ActionRefused, JobStatus
from ledger.storable import Unstorable, check_storable, storable_text
from ledger.submitters import Submitter
from pipelines.dsl import Pipeline
from pipelines.visualize import mermaid

# The arguments of one call, as JSON: larger is refused before anything reads them (the webhooks'
# default body cap; a plugin's payload is meant to be small, large data travels by reference).
MAX_ARGUMENT_BYTES = 1024 * 1024


class ToolError(Exception):
    """What was asked cannot be done, in words for the agent (the API's 400/403/404 message)."""


def actor(caller: Caller) -> Actor:
    return Actor(Submitter.MCP, caller.name)


def checked_arguments(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The call's arguments when the ledger could store them and they are not too large."""
    given = dict(arguments or {})
    try:
        check_storable(given, "arguments")
    except Unstorable as exc:
        raise ToolError(str(exc)) from None
    size = len(json.dumps(given, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > MAX_ARGUMENT_BYTES:
        raise ToolError(f"arguments: {size} bytes, more than the {MAX_ARGUMENT_BYTES} an MCP call may carry")
    return given


def validated(tool: Tool, arguments: dict[str, Any]) -> None:
    """The arguments against the tool's input schema (a plugin's from its manifest): every problem
    named with where it is, as the agent must fix it."""
    problems = sorted(_validator(tool).iter_errors(arguments), key=lambda e: list(e.path))
    if problems:
        shown = [f"{'/'.join(map(str, p.absolute_path)) or '(arguments)'}: {p.message[:300]}" for p in problems[:10]]
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise ToolError(f"arguments do not match {tool.name}'s input schema: " + "; ".join(shown) + more)


_VALIDATORS: dict[int, tuple[Tool, Any]] = {}


def _validator(tool: Tool) -> Any:
    """The tool's schema compiled once (a validator costs more to build than to run)."""
    kept = _VALIDATORS.get(id(tool))
    if kept is not None and kept[0] is tool:
        return kept[1]
    # Imported here: jsonschema costs a process that never validates (gateway.config.validity).
    from jsonschema import Draft202012Validator

    if len(_VALIDATORS) > 10_000:  # tools of runtimes a reload replaced
        _VALIDATORS.clear()
    validator = Draft202012Validator(tool.input_schema)
    _VALIDATORS[id(tool)] = (tool, validator)
    return validator


def fresh_connection() -> None:
    """A worker thread's database connection, replaced when a restart or an outage broke it (as
    Django does around each request)."""
    close_old_connections()


# -- writes: through the intake --------------------------------------------------------------


def run_plugin(runtime: Runtime, caller: Caller, plugin: str, command: str, payload: dict[str, Any]) -> dict[str, Any]:
    spec = intake.job(runtime, Submitter.MCP, plugin, command, payload, actor=caller.name)
    result = intake.submit(runtime, [spec])[0]
    body: dict[str, Any] = {"job_id": result.job_id, "status": result.status, "plugin": plugin, "command": command}
    if result.deduplicated:
        body["deduplicated"] = True
    return body


def run_pipeline(runtime: Runtime, caller: Caller, name: str, payload: dict[str, Any]) -> dict[str, Any]:
    pipeline_named(runtime, name)
    ids = intake.submit_ids(
        runtime, pipeline_entries(runtime, name, payload, submitter=Submitter.MCP, actor=caller.name)
    )
    return {"job_id": ids[0] if ids else None, "job_ids": ids, "status": "queued", "pipeline": name}


def publish(runtime: Runtime, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
    ids = publish_event(
        runtime,
        arguments["type"],
        dict(arguments.get("payload") or {}),
        submitter=Submitter.MCP,
        dedupe_key=arguments.get("dedupe_key"),
        actor=caller.name,
    )
    return {"event_type": arguments["type"], "job_ids": ids, "started": len(ids)}


def act_on_job(runtime: Runtime, caller: Caller, verb: str, job_id: str) -> dict[str, Any]:
    job = job_named(job_id)
    who = actor(caller)
    try:
        if verb == "job.replay":
            return {"job_id": replay(runtime, job, by=who), "replay_of": job.id, "status": "queued"}
        before = job.status
        if verb == "job.cancel":
            job.cancel(by=str(who))
            after = JobStatus.DEAD
        else:
            job.retry_now(by=str(who))
            after = JobStatus.QUEUED
    except ActionRefused as exc:
        raise ToolError(str(exc)) from None
    except LostJob as exc:
        raise ToolError(f"{exc}: it changed while this ran; nothing was done") from None
    return {"job_id": job.id, "from": before, "to": after, "attempt": job.attempt, "max_attempts": job.max_attempts}


# -- reads ------------------------------------------------------------------------------------


def job_named(job_id: str) -> Job:
    job = Job.objects.filter(pk=job_id).first() if storable_text(job_id) else None
    if job is None:
        raise ToolError(f"no job with id {job_id!r}")
    return job


def pipeline_named(runtime: Runtime, name: str) -> Pipeline:
    pipeline = runtime.pipelines.pipelines.get(name)
    if pipeline is None or pipeline.is_hook:
        known = ", ".join(sorted(n for n, p in runtime.pipelines.pipelines.items() if not p.is_hook))
        raise ToolError(f"no callable pipeline named {name!r} (known: {known or 'none configured'})")
    return pipeline


def inspect(caller: Caller, job_id: str) -> dict[str, Any]:
    """`job inspect`'s whole record for a caller that reads results; the API's `GET /job/{id}`
    and its tree, without what plugins wrote, for one that does not."""
    job = job_named(job_id)
    if caller.shaped({"result": True}):
        return job_detail(job)
    return {**caller.shaped(job_read(job)), "tree": tree(caller, job)}


def tree(caller: Caller, job: Job) -> list[dict[str, Any]]:
    return [caller.shaped(job_read(j)) for j in Job.objects.tree([job.id])]


def logs(caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
    filters: dict[str, Any] = {k: arguments.get(k) for k in ("job_id", "plugin", "command", "submitted_by", "query")}
    if filters["query"] and not caller.shaped({"result": True}):
        raise ToolError("`query` searches results, errors and stderr: the token needs jobs:result:ro")
    try:
        filters["status"] = normalise_status(arguments["status"]) if arguments.get("status") else None
        entries, total = find_logs(
            filters,
            start=None,
            end=None,
            limit=min(int(arguments.get("limit") or 50), MAX_LOGS),
            include_result=bool(arguments.get("include_result")),
        )
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    return {"logs": [caller.shaped(e) for e in entries], "total": total}


def dry_run(runtime: Runtime, arguments: dict[str, Any]) -> dict[str, Any]:
    name = arguments["name"]
    pipeline_named(runtime, name)
    starts = pipeline_starts(runtime, name, dict(arguments.get("payload") or {}), source=Submitter.MCP.value)
    return {"pipeline": name, **preview(runtime, starts)}


def visualize(runtime: Runtime, name: str) -> dict[str, Any]:
    return {"pipeline": name, "mermaid": mermaid(pipeline_named(runtime, name))}


def status(runtime: Runtime) -> dict[str, Any]:
    lease = runtime.config.service.lease_ttl
    return {**health_status(runtime, uptime_seconds()), **queue_status(lease_ttl=lease), "version": gateway_version()}


def doctor(runtime: Runtime) -> dict[str, Any]:
    findings = diagnose(runtime, nodes_report(timezone.now(), runtime.config.service.lease_ttl))
    return {
        "healthy": not any(f.severity == DOCTOR_ERROR for f in findings),
        "findings": [f.as_dict() for f in findings],
    }


def config(runtime: Runtime) -> dict[str, Any]:
    return served_config(runtime)


def skills_document(runtime: Runtime) -> str:
    return markdown(skills(runtime), version=gateway_version(), config_dir=str(runtime.config.config_dir))
