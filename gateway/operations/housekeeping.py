"""The gateway's own housekeeping, scheduled and run by django-q2 (its ORM broker, in the
gateway's database): retention pruning every hour (expired relay acceptances too), and scheduled
backups (`service.backup`).

django-q2 keeps the schedules as rows; `system start` writes them from the config at start and
after each SIGHUP (`refresh_schedules`), and supervises `manage.py qcluster`, which runs them. The
cluster runs only while there is housekeeping to do (`work_for_cluster`, asked by the supervisor).
Each task takes everything it needs as arguments stored in its schedule row, so a reload reaches
the cluster through the rows without restarting it. Plugin jobs never go through django-q2
(docs/architecture.md, "Where django-q2 fits").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.db import connection, transaction
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import Schedule
from django_q.scheduler import scheduler

from gateway.config.model import BackupCadence, GatewayConfig, ServiceConfig, load_gateway_config
from gateway.logs import logger
from gateway.operations.backups.archive import plan_for, write_backup
from gateway.runtime import RUNTIME
from ledger.models import (
    CircuitBreakerTransition,
    ConfigSnapshot,
    EgressHost,
    EventRecord,
    Job,
    JobAttempt,
    JobLog,
    JobStopwatch,
    JobTransition,
    PluginFact,
    RelayAcceptance,
    WorkerInstance,
)
from ledger.models.retention import PrunableQuerySet

log = logger("housekeeping")

PRUNE_SCHEDULE = "ductile.prune"
BACKUP_SCHEDULE = "ductile.backup"
PRUNE_EVERY_MINUTES = 60
# Rows per delete transaction at most (ledger/models/retention.py), and the time a batch (its read
# of ids, then its delete, which holds SQLite's one write lock) is sized to take: claims and
# enqueues wait up to about that long. Why by time: 500 job_queue rows took ~150 ms of lock on a
# ledger of 3 M jobs (each row is an entry in each of its 11 indexes), and enqueue -> start reached
# p99 1.6 s while retention ran. Why 50 ms: at 20 ms the read alone kept batches at their smallest
# (a prune of 97,000 jobs took 262 s); at 50 ms 47,000 took 12.5 s with enqueue -> start p99 3.7 ms
# (bench_ledger_scale.py; docs/performance.md, "A ledger of 10 million jobs").
PRUNE_BATCH = 500
BATCH_SECONDS = 0.05
MIN_BATCH = 100
# Between batches, at least, and as long as the batch took: writers queued on the lock get it
# before the next batch does, so a prune takes at most about half of the write lock's time.
BATCH_PAUSE = 0.005
# Seconds without housekeeping before `system start` stops the cluster (`system start
# --housekeeping-linger`): long enough that a burst of tasks is one start, short against an hour.
BACKUP_NAME = "ductile-{stamp}.tar.gz"
BACKUP_GLOB = "ductile-*.tar.gz"

_CADENCE_TYPES = {
    "minutes": Schedule.MINUTES,
    "hourly": Schedule.HOURLY,
    "daily": Schedule.DAILY,
    "weekly": Schedule.WEEKLY,
    "cron": Schedule.CRON,
}


# -- tasks (run by the qcluster's worker) ------------------------------------------------------


def prune(
    *,
    job_queue_retention: float,
    job_log_retention: float,
    job_transitions_retention: float | None = None,
    job_attempts_retention: float | None = None,
    breaker_transitions_retention: float = ServiceConfig.breaker_transitions_retention,
    batch: int = PRUNE_BATCH,
) -> dict[str, int]:
    """Delete what retention no longer keeps, in batches; returns rows deleted per table. The
    transitions' and attempts' clocks are job_log's unless given (a schedule row written before
    they existed has neither)."""
    now = timezone.now()

    def before(seconds: float | None) -> datetime:
        return now - timedelta(seconds=job_log_retention if seconds is None else seconds)

    log_cutoff = before(job_log_retention)
    attempts_cutoff = before(job_attempts_retention)
    deleted = {
        "job_queue": drain(Job.objects.expired(before(job_queue_retention)), batch),
        "job_log": drain(JobLog.objects.expired(log_cutoff), batch),
        "job_attempts": drain(JobAttempt.objects.expired(attempts_cutoff), batch),
        "egress_hosts": drain(EgressHost.objects.expired(attempts_cutoff), batch),  # what each attempt reached
        "job_transitions": drain(JobTransition.objects.expired(before(job_transitions_retention)), batch),
        "job_stopwatch": drain(JobStopwatch.objects.expired(log_cutoff), batch),
        "event_log": drain(EventRecord.objects.expired(log_cutoff), batch),
        # The history of configs, on the job history's clock; the config in force is kept.
        "config_snapshots": drain(ConfigSnapshot.objects.expired(log_cutoff), batch),
        # Each plugin's newest fact of each type is kept: plugin_state mirrors it.
        "plugin_facts": drain(PluginFact.objects.expired(log_cutoff), batch),
        "circuit_breaker_transitions": drain(
            CircuitBreakerTransition.objects.expired(before(breaker_transitions_retention)), batch
        ),
        # Past its own window (ledger/models/relay_acceptances.py): no replay or retry is answered from it.
        "relay_acceptances": drain(RelayAcceptance.objects.expired(now), batch),
        # Nodes silent for as long as the job history is kept (ledger.models.workers).
        "worker_instances": drain(WorkerInstance.objects.expired(log_cutoff), batch),
        # The console's login records (django-axes): every login and logout, and each failure.
        "axes_accesslog": drain(PrunableQuerySet(AccessLog).filter(attempt_time__lt=log_cutoff), batch),
        "axes_accessfailurelog": drain(PrunableQuerySet(AccessFailureLog).filter(attempt_time__lt=log_cutoff), batch),
        "axes_accessattempt": drain(PrunableQuerySet(AccessAttempt).filter(attempt_time__lt=log_cutoff), batch),
    }
    if any(deleted.values()):
        log.info("retention pruned %s", ", ".join(f"{n} {table}" for table, n in deleted.items() if n))
    return deleted


def drain(
    expired: PrunableQuerySet[Any],
    batch: int,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """`prune_batch` until a batch comes back short: each batch its own short transaction, sized
    so that it takes about BATCH_SECONDS (at most `batch` rows), each followed by a pause as long."""
    total, size = 0, batch
    while True:
        started = clock()
        count = expired.prune_batch(size)
        took = clock() - started
        total += count
        if count < size:
            return total
        size = min(batch, max(MIN_BATCH, int(size * BATCH_SECONDS / took))) if took > 0 else batch
        sleep(max(BATCH_PAUSE, took))


def scheduled_backup(*, config_dir: str, directory: str, keep: int, scope: str) -> dict[str, Any]:
    """One `service.backup` run: a new archive named by the time, then the oldest beyond `keep` go."""
    # The config as it is now on disk: this process may have started long before the last reload.
    config = load_gateway_config(Path(config_dir))
    folder = Path(directory)
    destination = folder / BACKUP_NAME.format(stamp=timezone.now().strftime("%Y%m%dT%H%M%SZ"))
    _, written = write_backup(plan_for(config, destination, scope), destination)
    removed = rotate(folder, keep)
    log.info("scheduled backup written: %s (%d bytes); %d old removed", written.path, written.size, len(removed))
    return {"archive": str(written.path), "size_bytes": written.size, "removed": [str(p) for p in removed]}


def rotate(folder: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` scheduled archives (their names sort by time)."""
    archives = sorted(folder.glob(BACKUP_GLOB))
    stale = archives[: max(len(archives) - keep, 0)]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


# -- schedules (written by the supervisor of `system start`) -----------------------------------


def wanted_schedules(config: GatewayConfig) -> dict[str, dict[str, Any]]:
    """The django-q2 schedule rows this config asks for, by name."""
    service = config.service
    rows = {
        PRUNE_SCHEDULE: {
            "func": f"{__name__}.prune",
            "kwargs": repr(
                {
                    "job_queue_retention": service.job_queue_retention,
                    "job_log_retention": service.job_log_retention,
                    "job_transitions_retention": service.job_transitions_retention,
                    "job_attempts_retention": service.job_attempts_retention,
                    "breaker_transitions_retention": service.breaker_transitions_retention,
                }
            ),
            **_cadence_fields(BackupCadence("minutes", minutes=PRUNE_EVERY_MINUTES)),
        }
    }
    if service.backup is not None:
        backup = service.backup
        rows[BACKUP_SCHEDULE] = {
            "func": f"{__name__}.scheduled_backup",
            "kwargs": repr(
                {
                    "config_dir": str(config.config_dir),
                    "directory": str(backup.directory),
                    "keep": backup.keep,
                    "scope": backup.scope,
                }
            ),
            **_cadence_fields(backup.cadence),
        }
    return rows


def _cadence_fields(cadence: BackupCadence) -> dict[str, Any]:
    return {"schedule_type": _CADENCE_TYPES[cadence.kind], "minutes": cadence.minutes, "cron": cadence.cron}


def sync_schedules(config: GatewayConfig, now: datetime | None = None) -> dict[str, str]:
    """Make the gateway's schedule rows match `config`: what happened to each, by name. A row whose
    definition is unchanged keeps its next run (restarts never postpone a daily backup); a new or
    changed prune runs at once, a new or changed backup at its next due time."""
    now = now or timezone.now()
    wanted = wanted_schedules(config)
    outcome = {}
    with transaction.atomic():
        existing = {s.name: s for s in Schedule.objects.select_for_update().filter(name__startswith="ductile.")}
        for name, fields in wanted.items():
            row = existing.pop(name, None)
            if row is not None and all(getattr(row, key) == value for key, value in fields.items()):
                outcome[name] = "unchanged"
                continue
            row = row or Schedule(name=name, repeats=-1)
            outcome[name] = "created" if row.pk is None else "updated"
            for key, value in fields.items():
                setattr(row, key, value)
            row.next_run = now if name == PRUNE_SCHEDULE else row.calculate_next_run(now)
            row.save()
        for name, row in existing.items():
            row.delete()
            outcome[name] = "removed"
    return outcome


def refresh_schedules(reloaded: bool) -> None:
    """The supervisor's `on_config`: rows from the current config (the supervisor's runtime,
    reloaded by it before it calls this), then anything due is queued for the cluster now rather
    than at its first scheduler pass, 30 s after it starts."""
    try:
        outcome = sync_schedules(RUNTIME.get().config)
        log.info("housekeeping schedules: %s", ", ".join(f"{n} {what}" for n, what in outcome.items()))
        scheduler()
    finally:
        connection.close()  # the supervisor holds no connection between reloads


def work_for_cluster(running: bool) -> bool:
    """The supervisor's question every few seconds: is there housekeeping for the cluster? A
    schedule due, or a task queued; while the cluster runs, also a task it has taken and not yet
    finished, so it is never stopped under one (its SIGTERM drains what it holds anyway). A task
    left taken by a cluster that was killed waits out its lock (`retry`) before it counts again."""
    try:
        due = Schedule.objects.exclude(repeats=0).filter(next_run__lte=timezone.now()).exists()
        if due and not running:
            scheduler()  # queue it now: a starting cluster's own first scheduler pass is 30 s away
        broker = get_broker()
        return due or broker.queue_size() > 0 or (running and broker.lock_size() > 0)
    finally:
        connection.close()  # the supervisor holds no connection between questions
