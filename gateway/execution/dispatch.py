"""Running one claimed job: preflight, spawn, judge, and record the outcome in one transaction."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.utils import timezone

from gateway import intake
from gateway.config.frozen import thaw
from gateway.config.sandbox import EGRESS, NONE
from gateway.execution.announcements import endings, preflight_event, signals
from gateway.execution.egress import PROXY as EGRESS_PROXY
from gateway.execution.leases import Leases
from gateway.execution.namespaces import empty_namespace
from gateway.execution.protocol import build_request, judge, stored_stderr
from gateway.execution.runner import run_plugin
from gateway.logs import logger
from gateway.plugins.registry import PluginInstance
from gateway.runtime import Runtime, RuntimeHolder
from gateway.storage.database import unavailable_reason
from ledger import job_notifications
from ledger.ids import new_id
from ledger.models import AttemptOutcome, EventContext, Job, JobSpec, LostJob, PluginState
from ledger.models.jobs import Ending
from ledger.states import JobStatus
from ledger.submitters import Submitter
from ledger.timestamps import rfc3339
from ledger.writes.transaction import writing
from pipelines.completion import Finished, aftermath, leads_somewhere, relayed_event, switch_branch
from pipelines.dsl import RELAY, SWITCH, SWITCH_TRUE, Node
from pipelines.successors import Position
from pipelines.templates import TemplateError, remap

log = logger("dispatch")


# The worker's claim of its next job (gateway/execution/workers.py), run inside a completion's transaction.
Claim = Callable[[], Job | None]

# An outcome the database refused is tried again after this pause, doubling up to the ceiling
# (seconds), while the lease lasts (`Executor._record_while_leased`).
RECORD_RETRY_FIRST = 0.25
RECORD_RETRY_CEILING = 2.0


class Executor:
    def __init__(
        self,
        holder: RuntimeHolder,
        worker_id: str,
        *,
        claim_next: Claim | None = None,
        leases: Leases | None = None,
    ):
        self.holder = holder
        self.worker_id = worker_id
        self.claim_next = claim_next
        # The leases its heartbeats renewed (the worker daemon's); without, the claim's lease.
        self.leases = leases

    def execute(self, job: Job) -> Job | None:
        """Run a job this worker has claimed through to a recorded outcome. With `claim_next`, the
        worker's next job is claimed in the transaction that records this one's outcome, and
        returned (None when there was none to claim, or the outcome was recorded otherwise)."""
        try:
            return self._execute(job)
        except Exception as exc:
            self._fail_unexpectedly(job, exc)
            return None

    def _fail_unexpectedly(self, job: Job, exc: Exception) -> None:
        """An exception escaped preflight, judging or recording: end the attempt as failed (and
        retried, spec §5.7), never leave the job `running` while this worker holds its lease."""
        log.exception(
            "unexpected error running the job; failing this attempt", extra={"plugin": job.plugin, "job_id": job.id}
        )
        # Why re-read: a rolled-back record_outcome has already moved the in-memory status.
        job.refresh_from_db()
        if job.status != JobStatus.RUNNING or job.claimed_by != self.worker_id:
            return  # the outcome was recorded before the error, or another process recovered the job
        outcome = AttemptOutcome(JobStatus.FAILED, error=f"internal error: {type(exc).__name__}: {exc}")
        runtime = self.holder.get()
        try:
            # A retry or a dead end is announced here too (job.retry_scheduled, job.dead, hooks):
            # an internal error must not make a job's end silent.
            conclude(runtime, job, outcome)
        except Exception:
            log.exception("announcing the failed attempt failed too", extra={"plugin": job.plugin, "job_id": job.id})
            outcome = AttemptOutcome(JobStatus.FAILED, error=outcome.error)
        try:
            job.record_outcome(outcome, worker=self.worker_id, default_dedupe_ttl=runtime.config.service.dedupe_ttl)
        except LostJob:
            pass  # recovered meanwhile: its next attempt is the one that counts

    def _execute(self, job: Job) -> Job | None:
        pre_started = time.perf_counter_ns()
        runtime = self.holder.get()
        position = self._position(job)
        if job.plugin == SWITCH:
            return self._switch(job, runtime, position)
        if job.plugin == RELAY:
            return self._relay(job, runtime, position)
        instance = runtime.registry.instances.get(job.plugin)
        refusal = intake.refusal(runtime, job.plugin, job.command)
        if refusal is None:
            try:
                event = self._remapped_event(job, runtime, position)
            except TemplateError as exc:
                refusal = f"preflight: {exc}"
        if refusal or instance is None:
            outcome = AttemptOutcome(JobStatus.FAILED, error=refusal, retryable=False)
            outcome.events.append(preflight_event(job, "fail", refusal or ""))
            return self._record(job, outcome, runtime)
        timeout = instance.config.timeout_for(job.command)
        now = timezone.now()
        request = build_request(
            job_id=job.id,
            command=job.command,
            config=thaw(instance.config.config),
            state=job.claim_reads.state if job.claim_reads else PluginState.current(instance.name),
            context=self._context(job, instance, position),
            event=event,
            deadline_at=rfc3339(now + timedelta(seconds=timeout)),
            instance=instance.name,
        )
        # The plugin's code again, as late as can be (issue 12: trust and seal checked at load only
        # let a swapped symlink or an edited entrypoint run).
        spawn = runtime.plugin_seal.check(instance)
        if spawn.refusal:
            outcome = AttemptOutcome(JobStatus.FAILED, error=spawn.refusal, retryable=False)
            outcome.events.append(preflight_event(job, "fail", spawn.refusal))
            return self._record(job, outcome, runtime)
        runtime_pre_ns = time.perf_counter_ns() - pre_started
        confinement = instance.confinement
        network, env, ticket = None, runtime.plugin_env, None
        if confinement.network == NONE:
            network = empty_namespace()
        elif confinement.network == EGRESS:
            ticket = EGRESS_PROXY.admit(job.id, confinement.egress)
            network, env = ticket.namespace, {**env, **ticket.env}
        try:
            run = run_plugin(spawn.path, request, timeout=timeout, env=env, confinement=confinement, network=network)
        finally:
            asked = EGRESS_PROXY.release(ticket) if ticket is not None else []
        if spawn.warning:
            run.warnings.insert(0, spawn.warning)
        post_started = time.perf_counter_ns()
        verdict = judge(run, timeout=timeout, max_subs=instance.manifest.max_subs)
        for warning in verdict.warnings:
            log.warning(warning, extra={"plugin": job.plugin, "job_id": job.id})
        outcome = AttemptOutcome(
            status=verdict.status,
            error=verdict.error,
            retryable=verdict.retryable,
            response_text=verdict.response_text,
            # What the runner saw of the plugin's processes (an escape) and what judging its answer
            # set aside (a dropped event, an ignored field) go with its stderr in job_log.
            stderr=stored_stderr(run.stderr, verdict.warnings),
            backoff_base=instance.config.retry.backoff_base,
            sandbox=confinement.profile,
            egress=asked,
        )
        outcome.events.append(preflight_event(job, "run", ""))
        emitted = None
        if verdict.status == JobStatus.SUCCEEDED:
            emitted = verdict.events
            if verdict.state_updates is not None:
                rule = instance.manifest.fact_rule(job.command)
                outcome.state_write = (instance.name, rule.fact_type if rule else None, verdict.state_updates)
        outcome.stopwatch = {
            "command": job.command,
            "step_name": position.node,  # the pipeline step this invocation ran, None outside one
            "enter_wall_ns": run.enter_wall_ns,
            "exit_wall_ns": run.exit_wall_ns,
            "dur_ns": run.dur_ns,
            "runtime_pre_ns": runtime_pre_ns,
            "status": verdict.stopwatch_status,
            "subs_json": verdict.subs,
            "runtime_post_ns": time.perf_counter_ns() - post_started,
        }
        return self._record(job, outcome, runtime, position, emitted=emitted, result=verdict.result, ran_with=event)

    # -- preflight -------------------------------------------------------------------------

    def _position(self, job: Job) -> Position:
        """The job's pipeline step, depth and baggage, from its event_context row."""
        if job.claim_reads is not None:  # read by the claim (ledger.models.jobs.ClaimReads)
            hop = job.claim_reads.hop
        else:
            hop = EventContext.hop(job.event_context_id) if job.event_context_id else None
        if hop is None:
            return Position(depth=job.route_depth)
        pipeline, step, baggage = hop
        return Position(pipeline, step, job.route_depth, baggage)

    def _node(self, runtime: Runtime, position: Position) -> Node | None:
        pipeline = runtime.pipelines.pipelines.get(position.pipeline or "")
        return pipeline.nodes.get(position.node or "") if pipeline else None

    def _remapped_event(self, job: Job, runtime: Runtime, position: Position) -> dict[str, Any]:
        """`with:` reshapes the request payload just before the spawn (DSL reference §3.7)."""
        event = dict(job.event or {})
        node = self._node(runtime, position)
        if node is not None and node.with_:
            scope = {"payload": event.get("payload") or {}, "context": dict(position.context or {})}
            event["payload"] = remap(event.get("payload") or {}, node.with_, scope)
        return event

    def _context(self, job: Job, instance: PluginInstance, position: Position) -> dict[str, Any]:
        context: dict[str, Any] = dict(position.context or {})
        context["ductile_plugin"] = instance.name
        if position.pipeline:
            context["ductile_pipeline"] = position.pipeline
        payload = (job.event or {}).get("payload") or {}
        for key in ("ductile_upstream_plugin", "ductile_upstream_pipeline"):
            if isinstance(payload, dict) and payload.get(key):
                context.setdefault(key, payload[key])
        return context

    # -- core.switch -------------------------------------------------------------------------

    def _switch(self, job: Job, runtime: Runtime, position: Position) -> Job | None:
        """The internal hop an `if:` compiles to: decide in-process, spawn nothing (spec 003 §6.3)."""
        pipeline = runtime.pipelines.pipelines.get(position.pipeline or "")
        node = self._node(runtime, position)
        if pipeline is None or node is None or node.condition is None:
            error = f"core.switch: pipeline step {position.pipeline}:{position.node} is no longer configured"
            return self._refuse(job, runtime, error)
        gated_plugin = runtime.registry.instances.get(pipeline.gated_plugin(node.id) or "")
        payload = (job.event or {}).get("payload") or {}
        scope = {
            "payload": payload,
            "context": dict(position.context or {}),
            "config": thaw(gated_plugin.config.config) if gated_plugin else {},
        }
        event = switch_branch(node.condition, scope)
        decision = str(event["type"] == SWITCH_TRUE).lower()
        response = {"status": "ok", "result": f"condition is {decision}", "events": [event]}
        outcome = AttemptOutcome(JobStatus.SUCCEEDED, response_text=json.dumps(response))
        outcome.events.append(preflight_event(job, "run", ""))
        return self._record(job, outcome, runtime, position, emitted=[event])

    # -- core.relay --------------------------------------------------------------------------

    def _relay(self, job: Job, runtime: Runtime, position: Position) -> Job | None:
        """A `relay:` step (DSL reference §3.5): send the projected event to the named instance,
        then move the pipeline on with the receiver's acceptance. Not accepted is a failed attempt,
        retried by the job's policy unless the receiver refused it (the sender owns the failure
        until the receiver's 202; a retry carries the same dedupe key)."""
        # Imported here: every worker imports this module at its start, and only a gateway whose
        # pipelines relay needs the sender (with urllib.request).
        from gateway.relay.sender import RelayFailed, send
        from gateway.relay.wire import Envelope
        from pipelines.relay_step import RelayStepError, project

        node = self._node(runtime, position)
        if node is None or node.relay is None:
            error = f"core.relay: pipeline step {position.pipeline}:{position.node} is no longer configured"
            return self._refuse(job, runtime, error)
        spec = node.relay
        try:
            projection = project(spec, job.event or {}, position.context or {})
        except RelayStepError as exc:
            return self._refuse(job, runtime, f"core.relay: step {position.node!r}: {exc}")
        origin = {
            "instance": runtime.config.service.name,
            "plugin": job.plugin,
            "job_id": job.id,
            "event_id": str((job.event or {}).get("event_id") or ""),
        }
        envelope = Envelope(spec.event, projection.payload, projection.dedupe_key, origin, projection.baggage)
        try:
            accepted = send(runtime.relay, runtime.config.service.name, spec.to, envelope)
        except RelayFailed as exc:
            outcome = AttemptOutcome(JobStatus.FAILED, error=f"core.relay: {exc}", retryable=exc.retryable)
            outcome.events.append(preflight_event(job, "run", ""))
            return self._record(job, outcome, runtime)
        event = relayed_event(
            spec,
            status=accepted.status,
            peer=accepted.peer,
            receiver_event_id=accepted.receiver_event_id,
            job_id=accepted.job_id,
        )
        result = {"status": "relayed", "to": spec.to, "event": spec.event, "accepted": accepted.as_dict()}
        outcome = AttemptOutcome(
            JobStatus.SUCCEEDED, response_text=json.dumps({"status": "ok", "result": result, "events": [event]})
        )
        outcome.events.append(preflight_event(job, "run", ""))
        return self._record(job, outcome, runtime, position, emitted=[event])

    def _refuse(self, job: Job, runtime: Runtime, error: str) -> Job | None:
        """An in-process step that cannot run as configured: failed for good, with why."""
        outcome = AttemptOutcome(JobStatus.FAILED, error=error, retryable=False)
        outcome.events.append(preflight_event(job, "fail", error))
        return self._record(job, outcome, runtime)

    def _record(
        self,
        job: Job,
        outcome: AttemptOutcome,
        runtime: Runtime,
        position: Position | None = None,
        *,
        emitted: list[dict[str, Any]] | None = None,
        result: Any = None,
        ran_with: dict[str, Any] | None = None,
    ) -> Job | None:
        conclude(runtime, job, outcome, position, emitted=emitted, result=result, ran_with=ran_with)
        instance = runtime.registry.instances.get(job.plugin)
        if job.submitter is Submitter.SCHEDULER and instance is not None:
            outcome.breaker_threshold = instance.config.circuit_breaker.threshold
        claimed_until = job.lease_until  # read now: a recording that fails has already cleared it
        try:
            following = self._commit(job, outcome, runtime)
        except (OperationalError, InterfaceError) as exc:
            if claimed_until is None or not self._record_while_leased(job, outcome, runtime, claimed_until, exc):
                return None
            following = None
        except LostJob as exc:
            # Why: our lease ran out and another process recovered the job; its next attempt is
            # the one that counts (at-least-once), so this result is dropped, not double-written.
            log.warning("result discarded: %s", exc, extra={"plugin": job.plugin, "job_id": job.id})
            return None
        # One line per attempt, for a person at the demo's terminal as for a log search: how it
        # ended, why, where it led, and what the plugin wrote on stderr (000 §11.4: at WARN).
        level = "info" if job.status == JobStatus.SUCCEEDED and not outcome.stderr else "warning"
        getattr(log, level)(
            "%s: %s%s%s%s",
            ended(job, outcome),
            job.command,
            f" ({outcome.error})" if outcome.error else "",
            routed(outcome.children),
            f"; plugin stderr: {outcome.stderr[:2000].rstrip()}" if outcome.stderr else "",
            extra={"plugin": job.plugin, "job_id": job.id},
        )
        return following

    def _commit(self, job: Job, outcome: AttemptOutcome, runtime: Runtime) -> Job | None:
        """Record the outcome and, with `claim_next`, claim the worker's next job in the same
        transaction: one write transaction per job instead of two (docs/performance.md,
        "Throughput"). Returns that job, or None.

        A claim the database refuses must not cost the outcome. Rather than a savepoint around the
        claim (two more statements on every job), the whole transaction is rolled back and the
        outcome recorded again alone; the worker then claims by itself, as after any empty claim."""

        def record() -> None:
            job.record_outcome(outcome, worker=self.worker_id, default_dedupe_ttl=runtime.config.service.dedupe_ttl)

        if self.claim_next is not None:
            try:
                with writing(), job_notifications.tallying_enqueues() as tally:
                    record()
                    following = self.claim_next()
                    # A child of this job was enqueued in this transaction: no other thread needs
                    # waking for it. (Were it an older child, a missed wake-up would only wait for
                    # the idle threads' re-check.)
                    tally.release(taken=int(following is not None and following.parent_job_id == job.id))
                    return following
            except DatabaseError as exc:
                log.warning(
                    "recording the outcome with the next job's claim failed (%s); recording it alone",
                    exc,
                    extra={"plugin": job.plugin, "job_id": job.id, "worker": self.worker_id},
                )
                job.refresh_from_db()  # the rolled-back attempt had moved the in-memory status
        with writing():
            record()
        return None

    def _record_while_leased(
        self, job: Job, outcome: AttemptOutcome, runtime: Runtime, lease: datetime, error: Exception
    ) -> bool:
        """The database refused the outcome of a run that happened (it is down, restarting, or its
        files cannot be written): keep it and try again, with a growing pause, for as long as this
        worker's lease on the job lasts, so that the plugin runs once. Why not drop it at once, as
        any lost compare-and-set is dropped: after a short outage the job then waited out its
        lease and ran again (issue 33). A heartbeat failing meanwhile loses no lease (Leases), and
        the compare-and-set on `claimed_by` still decides whose the job is; past the lease another
        worker may have taken it, and the result is dropped as before. Whether it was recorded."""
        extra = {"plugin": job.plugin, "job_id": job.id, "worker": self.worker_id}
        log.warning(
            "recording the outcome failed: %s; keeping it and trying again while this worker's lease lasts (until %s)",
            unavailable_reason(error),
            rfc3339(lease),
            extra=extra,
        )
        began, attempts, pause = time.monotonic(), 1, RECORD_RETRY_FIRST
        while True:
            if self.leases is not None:
                lease = self.leases.until(job, lease)
            left = (lease - timezone.now()).total_seconds()
            if attempts > 1 and left <= 0:
                log.warning(
                    "result discarded: the database refused it for as long as this worker's lease lasted "
                    "(%d attempts over %.0fs, last: %s); the job's next attempt will run it again",
                    attempts,
                    time.monotonic() - began,
                    unavailable_reason(error),
                    extra=extra,
                )
                return False
            time.sleep(max(min(pause, left), 0.0))
            pause = min(pause * 2, RECORD_RETRY_CEILING)
            attempts += 1
            connection.close_if_unusable_or_obsolete()  # one the outage broke is replaced
            try:
                job.refresh_from_db()  # the failed attempts moved the job in memory
                if job.lease_until is not None and job.lease_until > lease:
                    lease = job.lease_until
                if job.status != JobStatus.RUNNING or job.claimed_by != self.worker_id:
                    log.warning(
                        "the job is no longer running for this worker (its outcome was recorded after all, or "
                        "another worker recovered it): nothing more is recorded",
                        extra=extra,
                    )
                    return False
                with writing():
                    job.record_outcome(
                        outcome, worker=self.worker_id, default_dedupe_ttl=runtime.config.service.dedupe_ttl
                    )
            except (OperationalError, InterfaceError) as exc:
                error = exc
                continue
            except LostJob as exc:
                log.warning("result discarded: %s", exc, extra=extra)
                return False
            log.warning(
                "outcome recorded after %d attempts over %.0fs", attempts, time.monotonic() - began, extra=extra
            )
            return True


# Targets a job's log line names (a split can fan out to thousands): the rest are counted.
ROUTED_SHOWN = 3


def ended(job: Job, outcome: AttemptOutcome) -> str:
    """ "job succeeded", "job dead", or for a retry "attempt 1/3 failed, retry at 12:39:20Z" (a
    retried job is queued again, and "job queued" read as if nothing had happened)."""
    if job.status == JobStatus.QUEUED and outcome.retry_at is not None:
        return f"attempt {job.attempt - 1}/{job.max_attempts} failed, retry at {outcome.retry_at:%H:%M:%S}Z"
    return f"job {job.status}"


def routed(children: Sequence[JobSpec]) -> str:
    """What a job's one log line adds about the jobs it led to: "; routed echo.poll to
    echo_loud.handle" (one line per job: the demo's terminal printed a line per child too)."""
    if not children:
        return ""
    targets = [f"{c.event and c.event.get('type')} to {c.plugin}.{c.command}" for c in children[:ROUTED_SHOWN]]
    more = f" and {len(children) - ROUTED_SHOWN} more" if len(children) > ROUTED_SHOWN else ""
    return f"; routed {', '.join(targets)}{more}"


def conclude(
    runtime: Runtime,
    job: Job,
    outcome: AttemptOutcome,
    position: Position | None = None,
    *,
    emitted: list[dict[str, Any]] | None = None,
    result: Any = None,
    ran_with: dict[str, Any] | None = None,
    recovery: bool = False,
) -> None:
    """Add to `outcome`, before it is recorded, what its end announces and every job that follows:
    `pipelines.completion` decides them, the intake builds each job. Without `position` (no step
    ran: an internal error, a refusal, lease recovery) the job's depth alone. `recovery`: a lost job
    that lease recovery ends (its hooks fire with `recovery: true`; no retry is announced)."""
    position = position or Position(depth=job.route_depth)
    final = outcome.final_status(job.attempt, job.max_attempts)
    opening, announced = ([], []) if recovery else endings(job, outcome, final)
    logged, hooks = signals(runtime, job, outcome, final, recovery=recovery)
    if not leads_somewhere(emitted, position, opening=opening, announced=announced, signals=logged):
        return  # the common case: no Finished or Aftermath built for a job that leads nowhere
    finished = Finished(
        plugin=job.plugin,
        position=position,
        event=job.event or {},
        emitted=emitted,
        result=result,
        ran_with=ran_with,
        announced=announced,
        opening=opening,
        signals=logged,
        hooks=hooks,
        hook_depth=int((job.event or {}).get("hook_depth") or 0),
    )
    after = aftermath(
        finished,
        routes=runtime.routing,
        pipelines=runtime.pipelines,
        hook_max_depth=runtime.config.service.hook_max_depth,
        clock=lambda: rfc3339(timezone.now()),
        new_id=new_id,
    )
    outcome.events[:0] = after.opening
    outcome.events += after.events
    routed_events = len(after.opening) + len(after.events) - len(logged)
    if routed_events and not after.successors:
        log.debug("no route matched %d event(s)", routed_events, extra={"plugin": job.plugin, "job_id": job.id})
    outcome.children += [intake.successor(runtime, s, parent=job) for s in after.successors]
    for why in after.unstarted_hooks:
        log.warning(why, extra={"plugin": job.plugin, "job_id": job.id})


def recovery_ending(runtime: Runtime) -> Ending:
    """What announces a lost job that lease recovery ends dead: its hooks, with `recovery: true`."""

    def ending(job: Job, outcome: AttemptOutcome) -> None:
        conclude(runtime, job, outcome, recovery=True)

    return ending
