"""Running one claimed job: preflight, spawn, judge, and record the outcome in one transaction."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.utils import timezone

from gateway.config.frozen import thaw
from gateway.logs import logger
from gateway.plugins.registry import PluginInstance
from gateway.protocol import Verdict, build_request, judge
from gateway.runner import run_plugin
from gateway.runtime import Runtime, RuntimeHolder
from ledger.models import AttemptOutcome, EventContext, Job, JobSpec, LostJob, PluginState
from ledger.models.jobs import new_id
from ledger.models.workers import PluginHealth, PluginInstanceRecord
from ledger.states import JobStatus
from pipelines.routing import route

log = logger("dispatch")


def iso(dt: Any) -> str:
    return dt.isoformat().replace("+00:00", "Z")


class Executor:
    def __init__(self, holder: RuntimeHolder, worker_id: str):
        self.holder = holder
        self.worker_id = worker_id

    def execute(self, job: Job) -> None:
        """Run a job this worker has claimed through to a recorded outcome."""
        pre_started = time.perf_counter_ns()
        runtime = self.holder.get()
        instance = runtime.registry.instances.get(job.plugin)
        refusal = self._refusal(runtime, instance, job)
        if refusal or instance is None:
            self._record(job, AttemptOutcome(JobStatus.FAILED, error=refusal, retryable=False), runtime)
            return
        timeout = instance.config.timeout_for(job.command)
        now = timezone.now()
        request = build_request(
            job_id=job.id,
            command=job.command,
            config=thaw(instance.config.config),
            state=PluginState.current(instance.name),
            context=self._context(job, instance),
            event=dict(job.event or {}),
            deadline_at=iso(now + timedelta(seconds=timeout)),
            instance=instance.name,
        )
        runtime_pre_ns = time.perf_counter_ns() - pre_started
        run = run_plugin(instance.manifest.entrypoint, request, timeout=timeout, env=runtime.plugin_env)
        post_started = time.perf_counter_ns()
        verdict = judge(run, timeout=timeout, max_subs=instance.manifest.max_subs)
        for warning in verdict.warnings:
            log.warning(warning, extra={"plugin": job.plugin, "job_id": job.id})
        if run.stderr:
            log.warning(
                "plugin stderr: %s",
                run.stderr[:2000].decode("utf-8", "replace").rstrip(),
                extra={"plugin": job.plugin, "job_id": job.id},
            )
        outcome = AttemptOutcome(
            status=verdict.status,
            error=verdict.error,
            retryable=verdict.retryable,
            response_text=verdict.response_text,
            stderr=run.stderr.decode("utf-8", "replace"),
            backoff_base=instance.config.retry.backoff_base,
        )
        if verdict.status == JobStatus.SUCCEEDED:
            outcome.children = self._children(job, verdict, runtime)
            if verdict.state_updates is not None:
                rule = instance.manifest.fact_rule(job.command)
                outcome.state_write = (instance.name, rule.fact_type if rule else None, verdict.state_updates)
        outcome.stopwatch = {
            "command": job.command,
            "enter_wall_ns": run.enter_wall_ns,
            "exit_wall_ns": run.exit_wall_ns,
            "dur_ns": run.dur_ns,
            "runtime_pre_ns": runtime_pre_ns,
            "status": verdict.stopwatch_status,
            "subs_json": verdict.subs,
            "runtime_post_ns": time.perf_counter_ns() - post_started,
        }
        self._record(job, outcome, runtime)

    def _refusal(self, runtime: Runtime, instance: PluginInstance | None, job: Job) -> str | None:
        if instance is None:
            reason = runtime.registry.skipped.get(job.plugin)
            if job.plugin in runtime.registry.disabled:
                return f"plugin {job.plugin!r} is disabled (enabled: false)"
            return f"plugin {job.plugin!r} is not loaded" + (f": {reason}" if reason else "")
        if instance.command(job.command) is None:
            known = ", ".join(instance.manifest.commands)
            return f"plugin {job.plugin!r} has no command {job.command!r} (manifest declares: {known})"
        return None

    def _context(self, job: Job, instance: PluginInstance) -> dict[str, Any]:
        context: dict[str, Any] = {}
        if job.event_context_id:
            row = (
                EventContext.objects.filter(pk=job.event_context_id).values_list("accumulated_json", flat=True).first()
            )
            if isinstance(row, dict):
                context.update(row)
        context["ductile_plugin"] = instance.name
        payload = (job.event or {}).get("payload") or {}
        for key in ("ductile_upstream_plugin", "ductile_upstream_pipeline"):
            if isinstance(payload, dict) and payload.get(key):
                context.setdefault(key, payload[key])
        return context

    def _children(self, job: Job, verdict: Verdict, runtime: Runtime) -> list[JobSpec]:
        if not verdict.events:
            return []
        _, dispatches = route(runtime.routing, job.plugin, verdict.events, new_id, iso(timezone.now()))
        children = []
        for dispatch in dispatches:
            target = runtime.registry.instances.get(dispatch.plugin)
            children.append(
                JobSpec(
                    plugin=dispatch.plugin,
                    command=dispatch.command,
                    submitted_by="route",
                    payload=dispatch.event["payload"],
                    event=dispatch.event,
                    dedupe_key=dispatch.dedupe_key,
                    max_attempts=target.config.retry.max_attempts if target else 1,
                    parent_job_id=job.id,
                    source_event_id=dispatch.event["event_id"],
                    event_context_id=job.event_context_id,
                )
            )
        if not dispatches and verdict.events:
            log.debug(
                "no route matched %d event(s)", len(verdict.events), extra={"plugin": job.plugin, "job_id": job.id}
            )
        return children

    def _record(self, job: Job, outcome: AttemptOutcome, runtime: Runtime) -> None:
        try:
            job.record_outcome(outcome, worker=self.worker_id, default_dedupe_ttl=runtime.config.service.dedupe_ttl)
        except LostJob as exc:
            # Why: our lease ran out and another process recovered the job; its next attempt is
            # the one that counts (at-least-once), so this result is dropped, not double-written.
            log.warning("result discarded: %s", exc, extra={"plugin": job.plugin, "job_id": job.id})
            return
        level = "info" if job.status == JobStatus.SUCCEEDED else "warning"
        getattr(log, level)(
            "job %s: %s%s",
            job.status,
            job.command,
            f" ({outcome.error})" if outcome.error else "",
            extra={"plugin": job.plugin, "job_id": job.id},
        )
        for child in outcome.children:
            log.info(
                "routed %s to %s.%s",
                child.event and child.event.get("type"),
                child.plugin,
                child.command,
                extra={"plugin": job.plugin, "job_id": job.id},
            )
        if job.command == "init" and job.submitted_by == "system":
            healthy = outcome.status == JobStatus.SUCCEEDED
            PluginInstanceRecord.objects.filter(name=job.plugin).update(
                health=PluginHealth.HEALTHY if healthy else PluginHealth.UNHEALTHY,
                last_error=None if healthy else outcome.error,
                updated_at=timezone.now(),
            )
