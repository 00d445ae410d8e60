"""One job's whole story, read for its console page: the tree it belongs to, its transitions,
every attempt with its timings, the events it emitted, the facts it wrote, and the baggage it
carried with the hop that claimed each key. Everything shown passes through `Safe` (the same
redaction as `/config/view`, plus the config's secret values scrubbed from text)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.config.redaction import REDACTED
from gateway.console.render import capped
from gateway.console.safety import Safe
from gateway.reports import added_paths, claims_only, depth_first, parse_response, tree_root
from ledger.models import (
    EgressHost,
    EventContext,
    EventRecord,
    Job,
    JobAttempt,
    JobLog,
    JobStopwatch,
    JobTransition,
    PluginFact,
)
from pipelines.successors import CONTROL

# Rows of a tree shown on one page (a split can fan out to thousands).
TREE_CAP = 300
EVENTS_CAP = 200
FACTS_CAP = 50


@dataclass
class Hop:
    job: Job
    depth: int
    where: str  # "pipeline:step", or "" outside pipelines
    this: bool


@dataclass
class Claim:
    path: str
    value: Any
    job_id: str | None  # the hop that claimed it
    where: str


@dataclass
class Attempt:
    log: JobLog
    stopwatch: JobStopwatch | None
    result: Any  # parsed JSON (redacted) or text
    result_is_json: bool
    stderr: str
    stderr_omitted: int
    error: str
    sandbox: str | None = None  # the profile the plugin ran under
    # Hosts it asked the egress proxy for: {"host", "verdict", "requests"}.
    egress: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Story:
    job: Job
    where: str
    parent: Job | None
    children: list[Job]
    last_error: str
    payload: Any
    event: Any
    transitions: list[JobTransition]
    attempts: list[Attempt]
    tree: list[Hop]
    tree_truncated: bool
    baggage: Any
    control: Any
    claims: list[Claim]
    events: list[tuple[EventRecord, Any]] = field(default_factory=list)
    facts: list[tuple[PluginFact, Any]] = field(default_factory=list)


def where(context: EventContext | None) -> str:
    return f"{context.pipeline_name}:{context.step_id}" if context and context.pipeline_name else ""


def read_story(job: Job, safe: Safe) -> Story:
    context = EventContext.objects.filter(pk=job.event_context_id).first() if job.event_context_id else None
    safe = safe.knowing(job.payload, job.event, context.accumulated_json if context else None)
    parent = Job.objects.filter(pk=job.parent_job_id).first() if job.parent_job_id else None
    tree, truncated = _tree(job)
    baggage = context.accumulated_json if context else None
    transitions = list(JobTransition.objects.filter(job_id=job.id).order_by("id"))
    for t in transitions:
        t.reason = safe.text(t.reason)
    return Story(
        job=job,
        where=where(context),
        parent=parent,
        children=list(Job.objects.filter(parent_job_id=job.id).order_by("created_at")[:TREE_CAP]),
        last_error=safe.text(job.last_error),
        payload=safe.json(job.payload),
        event=safe.json(job.event),
        transitions=transitions,
        attempts=_attempts(job, safe),
        tree=tree,
        tree_truncated=truncated,
        baggage=safe.json(claims_only(baggage)) if baggage else None,
        control=safe.json((baggage or {}).get(CONTROL)),
        claims=_claims(context, safe),
        events=[
            (e, safe.json(e.payload)) for e in EventRecord.objects.filter(job_id=job.id).order_by("id")[:EVENTS_CAP]
        ],
        facts=[
            (f, safe.json(f.fact_json)) for f in PluginFact.objects.filter(job_id=job.id).order_by("id")[:FACTS_CAP]
        ],
    )


def _attempts(job: Job, safe: Safe) -> list[Attempt]:
    timings = {s.attempt: s for s in JobStopwatch.objects.filter(job_id=job.id).order_by("id")}
    profiles = dict(JobAttempt.objects.filter(job_id=job.id).values_list("attempt", "sandbox"))
    egress = EgressHost.objects.of_job(job.id)
    attempts = []
    for log in JobLog.objects.filter(job_id=job.id).order_by("completed_at"):
        parsed = parse_response(log.result)
        is_json = isinstance(parsed, dict | list)
        stderr, omitted = capped(safe.text(log.stderr))
        attempts.append(
            Attempt(
                log=log,
                stopwatch=timings.get(log.attempt),
                result=safe.json(parsed) if is_json else capped(safe.text(parsed))[0] if parsed else None,
                result_is_json=is_json,
                stderr=stderr,
                stderr_omitted=omitted,
                error=safe.text(log.last_error),
                sandbox=profiles.get(log.attempt),
                egress=[e for e in egress if e["attempt"] == log.attempt],
            )
        )
    return attempts


def _tree(job: Job) -> tuple[list[Hop], bool]:
    """The tree from its root, depth-first (each job's children right under it), capped."""
    root = tree_root(job)
    jobs = Job.objects.tree([root.id], limit=TREE_CAP + 1)
    truncated = len(jobs) > TREE_CAP
    jobs = jobs[:TREE_CAP]
    contexts = EventContext.objects.in_bulk([j.event_context_id for j in jobs if j.event_context_id])
    hops = [
        Hop(job=node, depth=depth, where=where(contexts.get(node.event_context_id or "")), this=node.id == job.id)
        for node, depth in depth_first(jobs, lambda j: j.id, lambda j: j.parent_job_id)
    ]
    return hops, truncated


def _claims(context: EventContext | None, safe: Safe) -> list[Claim]:
    """Each baggage path this job carried, with the hop that first added it (spec 001 §3: claims
    accrete hop by hop; `origin_*` keys are never overwritten)."""
    if context is None:
        return []
    chain = [context]
    while chain[-1].parent_id and len(chain) < 100:
        parent = EventContext.objects.filter(pk=chain[-1].parent_id).first()
        if parent is None:
            break  # pruned by retention: the oldest surviving hop stands in for the first
        chain.append(parent)
    chain.reverse()
    first_job: dict[str | None, str] = {}
    for job_id, context_id in (
        Job.objects.filter(event_context_id__in=[c.id for c in chain])
        .order_by("-created_at")
        .values_list("id", "event_context_id")
    ):
        first_job[context_id] = job_id  # newest first, so the original (not a replay) wins
    # Redacted whole, then read by path: a secret-like key hides its value wherever it sits.
    carried = safe.json(claims_only(context.accumulated_json))
    claims = []
    before: Any = {}
    for hop in chain:
        now = claims_only(hop.accumulated_json)
        for added in added_paths(before, now):
            for path in _leaves(added, _dig(carried, added)):
                claims.append(Claim(path, _dig(carried, path), first_job.get(hop.id), where(hop)))
        before = now
    return claims


def _dig(value: Any, path: str) -> Any:
    for part in path.split("."):
        if value == REDACTED:
            return value  # a redacted subtree: everything under it is hidden too
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _leaves(path: str, value: Any) -> list[str]:
    """The dotted paths of `value`'s leaves under `path` (`origin` -> `origin.user`, ...)."""
    if not isinstance(value, dict) or not value:
        return [path]
    return [leaf for key, child in value.items() for leaf in _leaves(f"{path}.{key}", child)]
