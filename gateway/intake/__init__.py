"""One front door for every job (ARCHITECTURE, "One intake").

Every producer hands its request here: the API's triggers, webhooks, the CLI, root events and
pipelines, the scheduler, plugin `init`, the successors of a finished job (pipeline hops, routes,
lifecycle hooks: `pipelines.completion`) and replays. The intake resolves the target once (one
refusal message for every caller), builds the job with its `Submitter`, applies the retry default (the target's
`retry.max_attempts`) and the dedupe default (`service.dedupe_ttl`), checks that the ledger can
store what it was given (`ledger.storable`, the same answer on SQLite and PostgreSQL), and
enqueues through the ledger's write methods, which take whatever lock the backend needs. No
producer builds a `JobSpec` or takes a lock by itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from gateway.config.model import RetryPolicy
from gateway.plugins.registry import PluginInstance
from gateway.runtime import Runtime
from ledger.models import EnqueueResult, Job, JobSpec
from ledger.states import JobStatus
from ledger.storable import Unstorable, check_storable, storable_text
from ledger.submitters import Submitter
from ledger.writes.group_commit import shared
from pipelines.dsl import RELAY
from pipelines.successors import Successor

DEDUPE_KEY_MAX = int(Job._meta.get_field("dedupe_key").max_length or 512)
# `init` runs once per plugin fingerprint and is never retried (spec 000 §5.2).
INIT_DEDUPE_TTL = 365 * 86400.0


class Refused(Exception):
    """The job cannot be taken. `not_found`: the target does not exist or cannot run (the API's
    404); otherwise what was sent is wrong (its 400)."""

    def __init__(self, message: str, *, not_found: bool = False, too_large: tuple[int, int] | None = None):
        super().__init__(message)
        self.not_found = not_found
        # (bytes, limit) when what was sent would make a pipeline's context too large (the API's 413).
        self.too_large = too_large

    @property
    def status(self) -> int:
        """The HTTP status every surface answers it with: 413, 404 or 400."""
        return 413 if self.too_large is not None else 404 if self.not_found else 400

    def body(self) -> dict[str, Any]:
        """`{error}`, and past the context cap the original's `{bytes_actual, bytes_limit}`."""
        if self.too_large is None:
            return {"error": str(self)}
        actual, limit = self.too_large
        return {"error": str(self), "bytes_actual": actual, "bytes_limit": limit}


# -- the target ------------------------------------------------------------------------------


def refusal(runtime: Runtime, plugin: str, command: str) -> str | None:
    """Why `plugin.command` cannot run now, in the words every producer gives; None when it can."""
    registry = runtime.registry
    instance = registry.instances.get(plugin)
    if instance is None:
        if plugin in registry.disabled:
            return f"plugin {plugin!r} cannot run: it is disabled (enabled: false)"
        if plugin in registry.skipped:
            return f"plugin {plugin!r} cannot run: {registry.skipped[plugin]}"
        if plugin in registry.discovery.manifests:
            return f"plugin {plugin!r} cannot run: it is not configured (found in plugin_roots; add it under plugins:)"
        return f"plugin {plugin!r} does not exist: {_runnable(registry.instances)}"
    if instance.command(command) is None:
        return f"plugin {plugin!r} has no command {command!r} (it has: {', '.join(instance.manifest.commands)})"
    return None


# Names listed in a refusal for a plugin that does not exist: enough to spot a typo.
SHOWN_PLUGINS = 20


def _runnable(instances: Mapping[str, PluginInstance]) -> str:
    names = sorted(instances)
    if not names:
        return "no plugin is configured"
    more = f" and {len(names) - SHOWN_PLUGINS} more" if len(names) > SHOWN_PLUGINS else ""
    return f"the configured plugins are {', '.join(names[:SHOWN_PLUGINS])}{more}"


def resolve(runtime: Runtime, plugin: str, command: str) -> PluginInstance:
    if (reason := refusal(runtime, plugin, command)) is not None:
        raise Refused(reason, not_found=True)
    return runtime.registry.instances[plugin]


def _attempts(runtime: Runtime, plugin: str, fallback: int = 1) -> int:
    instance = runtime.registry.instances.get(plugin)
    if instance is None and plugin == RELAY:
        # A relay step's send may meet a network down or a receiver restarting: the default
        # retry policy, as for a plugin (the sender owns a failure until the receiver's 202).
        return RetryPolicy.max_attempts
    return instance.config.retry.max_attempts if instance else fallback


def checked(value: Any, what: str) -> Any:
    """`value` when the ledger can store it, else Refused naming where it cannot."""
    try:
        check_storable(value, what)
    except Unstorable as exc:
        raise Refused(str(exc)) from None
    return value


def _dedupe_key(key: Any) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str):
        raise Refused("dedupe_key: must be a string")
    if len(key) > DEDUPE_KEY_MAX:
        raise Refused(f"dedupe_key: must be at most {DEDUPE_KEY_MAX} characters")
    if not storable_text(key):
        return checked(key, "dedupe_key")
    return key


# -- the jobs each producer asks for ---------------------------------------------------------


def job(
    runtime: Runtime,
    submitter: Submitter,
    plugin: str,
    command: str,
    payload: Mapping[str, Any] | None = None,
    *,
    dedupe_key: Any = None,
    actor: str | None = None,
    note: str | None = None,
) -> JobSpec:
    """One job for one plugin command, bypassing routing (the API's plugin trigger, `plugin run`,
    a webhook). Refused when the target cannot run or the input cannot be stored."""
    instance = resolve(runtime, plugin, command)
    return JobSpec(
        plugin=plugin,
        command=command,
        submitter=submitter,
        payload=checked(dict(payload or {}), "payload"),
        dedupe_key=_dedupe_key(dedupe_key),
        max_attempts=instance.config.retry.max_attempts,
        actor=actor,
        note=note,
    )


def scheduled(
    runtime: Runtime, plugin: str, command: str, payload: Mapping[str, Any], *, dedupe_key: str, note: str
) -> JobSpec:
    """A schedule's run. The scheduler applied its own duplicate policy (if_running, the poll
    guard) when it admitted the run: the key is kept for tracing and same-key exclusion only."""
    instance = resolve(runtime, plugin, command)
    return JobSpec(
        plugin=plugin,
        command=command,
        submitter=Submitter.SCHEDULER,
        payload=checked(dict(payload), "payload"),
        dedupe_key=dedupe_key,
        dedupe_checked=True,
        max_attempts=instance.config.retry.max_attempts,
        note=note,
    )


def init(runtime: Runtime, plugin: str, fingerprint: str) -> JobSpec:
    """A plugin's `init` for this fingerprint of its code and config: once, never retried."""
    resolve(runtime, plugin, "init")
    return JobSpec(
        plugin=plugin,
        command="init",
        submitter=Submitter.SYSTEM,
        max_attempts=1,
        dedupe_key=f"init:{plugin}:{fingerprint}",
        dedupe_ttl=INIT_DEDUPE_TTL,
    )


def successor(
    runtime: Runtime,
    found: Successor,
    *,
    parent: Job | None,
    submitter: Submitter = Submitter.ROUTE,
    actor: str | None = None,
) -> JobSpec:
    """A successor `pipelines.completion` or the router found: a pipeline hop, a route's target,
    a root event's entry step, or a hook's (a fresh root whose parent is the job that signalled,
    submitted by `hook`). Never refused here: its parent's outcome is recorded whatever it is. A
    target that cannot run fails at its preflight (gateway.execution.dispatch) with `refusal`'s
    words; one the router refused (depth, baggage) is recorded `dead` with the router's reason."""
    hook = found.hook_depth is not None
    event = {**found.event, "payload": dict(found.event.get("payload") or {})}
    if hook:
        event["hook_depth"] = found.hook_depth
        submitter = Submitter.HOOK
    context_id = parent.event_context_id if parent is not None and not hook else None
    root = None
    if found.root is not None:
        if found.opens_root:
            root = (found.root.id, context_id, found.root.pipeline, found.root.accumulated)
        context_id = found.root.id
    return JobSpec(
        plugin=found.plugin,
        command=found.command,
        submitter=submitter,
        actor=actor,
        payload=event["payload"],
        event=event,
        dedupe_key=found.dedupe_key,
        max_attempts=_attempts(runtime, found.plugin),
        parent_job_id=parent.id if parent else None,
        source_event_id=event.get("event_id"),
        event_context_id=context_id,
        route_depth=found.depth,
        step=(found.pipeline, found.node, found.context or {}) if found.pipeline and found.node else None,
        refusal=found.refusal,
        refusal_status=JobStatus.FAILED if found.claim_failed else JobStatus.DEAD,
        root_context=root,
    )


def replay(runtime: Runtime, original: Job, submitter: Submitter, *, actor: str | None = None) -> JobSpec:
    """A new job for the same step from the stored `event_context` (spec 001 §6.1): same event,
    payload, baggage row, parent and depth, so it runs and routes on exactly as the original did,
    with the attempts its plugin is configured for now. No dedupe key: a replay is asked for on
    purpose. ActionRefused for a job that has not finished."""
    original.check_replayable()
    return JobSpec(
        plugin=original.plugin,
        command=original.command,
        submitter=submitter,
        actor=actor,
        payload=original.payload,
        event=original.event,
        max_attempts=_attempts(runtime, original.plugin, fallback=original.max_attempts),
        parent_job_id=original.parent_job_id,
        source_event_id=original.source_event_id,
        event_context_id=original.event_context_id,
        route_depth=original.route_depth,
        note=f"replay of {original.id}",
    )


# -- enqueueing ------------------------------------------------------------------------------


def submit(runtime: Runtime, specs: Sequence[JobSpec], *, now: datetime | None = None) -> list[EnqueueResult]:
    """Enqueue `specs` in one transaction, with the config's dedupe window as the default."""
    ttl = runtime.config.service.dedupe_ttl
    return shared(lambda: [Job.objects.enqueue(spec, default_dedupe_ttl=ttl, now=now) for spec in specs])


def submit_ids(runtime: Runtime, specs: Sequence[JobSpec]) -> list[str]:
    return [result.job_id for result in submit(runtime, specs)]


def submit_decided(specs: Sequence[JobSpec], *, now: datetime) -> list[str]:
    """Jobs whose admission their producer decided (the scheduler's batch): one batched insert
    (`JobQuerySet.enqueue_many`). Call inside the producer's own `writing()` transaction."""
    return Job.objects.enqueue_many(specs, now=now)
