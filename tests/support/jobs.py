"""Running jobs in-process through the worker daemon's own loop, and reading what they recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.runtime import RuntimeHolder
    from ledger.models import Job, JobLog


def run_until_idle(holder: RuntimeHolder, *, limit: int = 50, plugins: Collection[str] | None = None) -> int:
    """Run every job that is runnable now, and every job those runs enqueue (routed children,
    pipeline hops, `if:` switches), until none is due; the number of jobs run.

    The loop is the worker daemon's own (`runworkers --once`): WorkerDaemon's worker thread claims
    with the daemon's caps (every plugin at its cap plus `core.switch`) and runs each job through
    dispatch's Executor. Only the thread is driven, not `WorkerDaemon.run()`: registering a worker
    row, recovering lost jobs and scheduling `init` jobs are the daemon's start-up duties, tested
    with a real `runworkers` process (tests/processes/test_daemon.py), and would add rows a test of
    something else does not expect. A job whose retry is due later is left queued, as a worker
    would leave it.
    """
    from django.utils import timezone

    from gateway.execution.workers import WorkerDaemon
    from ledger.models import Job

    daemon = WorkerDaemon(holder, threads=1, plugins=plugins, once=True, max_jobs=limit, install_signals=False)
    # Its own thread, as in the daemon: the worker loop closes its database connections when it
    # ends, which must not be the test's own.
    worker = threading.Thread(target=daemon.work, name="ductile-test-worker")
    worker.start()
    worker.join()
    if daemon.claimed >= limit:
        caps = holder.get().claim_caps()
        if Job.objects.look(list(plugins or caps), timezone.now()).due:
            raise AssertionError(f"the queue was not idle after {limit} jobs")
    return daemon.claimed


def jobs_by_step(pipeline: str, exclude: Collection[str] = ()) -> dict[str | None, Job]:
    """The jobs of a pipeline's runs by step id (one run's, when the jobs of earlier runs are
    `exclude`d)."""
    from ledger.models import EventContext, Job

    # Keyed as Job.event_context_id is typed (nullable); every job picked here has a context.
    contexts: dict[str | None, str | None] = dict(
        EventContext.objects.filter(pipeline_name=pipeline).values_list("id", "step_id")
    )
    jobs = Job.objects.filter(event_context_id__in=list(contexts)).exclude(pk__in=list(exclude))
    return {contexts[job.event_context_id]: job for job in jobs}


def run_job(holder: RuntimeHolder, plugin: str, command: str = "poll", payload: Any = None, **spec: Any) -> Job:
    """Enqueue one job (the plugin's retry budget unless `max_attempts` is given) and run it, and
    whatever it enqueues, until the queue is idle; the job as it stands afterwards."""
    [job] = run_jobs(holder, [(plugin, command, payload)], **spec)
    return job


def run_jobs(holder: RuntimeHolder, jobs: list[tuple[str, str, Any]], **spec: Any) -> list[Job]:
    """`run_job` for a table of (plugin, command, payload): all enqueued, then run in one pass of
    the worker loop (a table of cases costs one worker start, not one each); the jobs in order."""
    from ledger.models import Job, JobSpec
    from ledger.submitters import Submitter

    ids = []
    for plugin, command, payload in jobs:
        attempts = spec.get("max_attempts", holder.get().registry.instances[plugin].config.retry.max_attempts)
        job_spec = JobSpec(
            plugin=plugin,
            command=command,
            submitter=Submitter.CLI,
            payload=payload,
            **{**spec, "max_attempts": attempts},
        )
        ids.append(Job.objects.enqueue(job_spec, default_dedupe_ttl=86400).job_id)
    run_until_idle(holder, limit=max(50, 4 * len(jobs)))
    found = Job.objects.in_bulk(ids)
    return [found[job_id] for job_id in ids]


def last_log(job: Job) -> JobLog:
    """The job's latest attempt as the ledger recorded it."""
    from ledger.models import JobLog

    return JobLog.objects.filter(job_id=job.id).latest("completed_at")


def last_result(job: Job) -> str:
    """What the job's latest attempt wrote (its response, or what was kept of it)."""
    result = last_log(job).result
    assert result is not None, f"job {job.id}'s last attempt kept no output"
    return result


def last_response(job: Job) -> Any:
    """The JSON response of the job's latest attempt."""
    return json.loads(last_result(job))
