"""`worker_instances` (who holds which claims) and `plugin_instances` (init and health per
configured plugin)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

from ledger import sql
from ledger.models.retention import PrunableQuerySet
from ledger.writes.transaction import writing


class WorkerState(models.TextChoices):
    RUNNING = "running"
    STOPPED = "stopped"
    LOST = "lost"


# Read by WorkerInstanceQuerySet.dead_on_host: a host's other running daemons.
ALIVE_ON_HOST = "SELECT id, pid FROM worker_instances WHERE state = 'running' AND hostname = %s AND id <> %s"


# A node's `roles` (`system start --role`): a worker daemon's row says WORKERS; a `system start`
# supervisor's names what it runs itself (the listeners' `api`, the resident `scheduler`,
# `housekeeping`), a standalone `runscheduler`'s `scheduler`.
WORKERS = "workers"
# A CLI call running its own job (`plugin run`): a row while it runs, so recovery sees its claim
# as a dead worker's at once should the process die; not a node (the nodes list leaves it out).
CLI = "cli"


def beat_every(lease_ttl: float) -> float:
    """How often a live process renews its row and its jobs' leases: four times a lease, so one
    missed beat never lets a lease run out; at most once a second."""
    return max(lease_ttl / 4, 1.0)


class WorkerInstanceQuerySet(PrunableQuerySet["WorkerInstance"]):
    def expired(self, before: datetime) -> WorkerInstanceQuerySet:
        """Nodes not heard from since `before` (now minus `job_log_retention`), whatever their
        state: stopped, lost, or `running` on a host that went away for good (a container's
        hostname is new at every start). Every daemon's start adds a row; without this the
        table only grew. Jobs keep the id in `claimed_by`, as text."""
        return self.filter(heartbeat_at__lt=before)

    def alive(self) -> WorkerInstanceQuerySet:
        return self.filter(state=WorkerState.RUNNING)

    def workers(self) -> WorkerInstanceQuerySet:
        """The rows of processes that claim jobs (not the API's or a scheduler's)."""
        return self.filter(roles=WORKERS)

    def heartbeating(self, now: datetime, lease_ttl: float) -> WorkerInstanceQuerySet:
        """Running and heard from within one lease: what status reports count as live."""
        return self.alive().filter(heartbeat_at__gte=now - timedelta(seconds=lease_ttl))

    def serving(self, now: datetime, lease_ttl: float) -> frozenset[str] | None:
        """The plugins the live workers claim between them; None when one claims every plugin
        (no group, no --plugins). Empty when no worker is live."""
        served: set[str] = set()
        for plugins in self.heartbeating(now, lease_ttl).workers().values_list("plugins", flat=True):
            if not plugins:
                return None
            served.update(plugins.split(","))
        return frozenset(served)

    def dead_on_host(self, hostname: str, *, exclude: str) -> list[str]:
        """Ids of workers on this host whose process is gone: their claims need no lease wait."""
        # Hand-written: every daemon asks every few seconds, idle ones too, and the ORM's query cost
        # ~1 ms of CPU to build (docs/performance-history.md item 31).
        others = sql.fetch_rows(ALIVE_ON_HOST, [hostname, exclude])
        return [worker_id for worker_id, pid in others if not pid_alive(pid)]

    def mark_lost(self, worker_ids: list[str], now: datetime) -> int:
        with writing():
            return self.filter(id__in=worker_ids, state=WorkerState.RUNNING).update(
                state=WorkerState.LOST, stopped_at=now
            )

    def register(
        self,
        worker_id: str,
        *,
        hostname: str,
        pid: int,
        threads: int,
        plugins: str,
        version: str = "",
        group: str = "",
        roles: str = WORKERS,
    ) -> WorkerInstance:
        """A daemon's row, made as it starts: what `system status` lists as a node and counts,
        and recovery reads."""
        with writing():
            return self.create(
                id=worker_id,
                hostname=hostname,
                pid=pid,
                threads=threads,
                plugins=plugins,
                version=version,
                worker_group=group,
                roles=roles,
            )

    def serve(self, worker_id: str, plugins: str) -> None:
        """A running worker's plugin filter changed (its group, by a config reload)."""
        with writing():
            self.filter(pk=worker_id).update(plugins=plugins)

    def heard_from(self, since: datetime) -> WorkerInstanceQuerySet:
        """The nodes to list: every row heard from since `since`, whatever its state now. A
        node's row is never removed, and one whose host went away for good (a container's
        hostname is new at each start) stays `running` with an ever older heartbeat."""
        return self.filter(heartbeat_at__gte=since)


class WorkerInstance(models.Model):
    id = models.CharField(primary_key=True, max_length=200)
    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    plugins = models.TextField(blank=True, default="")  # worker-group filter; empty: every plugin
    # The named group of `service.worker_groups` the filter came from (`runworkers --group`);
    # empty for `--plugins` or no filter. Not `group`: a reserved word in SQL.
    worker_group = models.CharField(max_length=200, blank=True, default="")
    version = models.CharField(max_length=64, blank=True, default="")  # the gateway's, as it started
    threads = models.IntegerField(default=1)  # its slots: plugin processes it runs at once
    roles = models.CharField(max_length=100, default=WORKERS)  # comma-separated (WORKERS)
    state = models.CharField(max_length=16, choices=WorkerState.choices, default=WorkerState.RUNNING)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)

    objects = WorkerInstanceQuerySet.as_manager()

    class Meta:
        db_table = "worker_instances"
        # Read by dead_on_host at every recovery pass.
        indexes = [
            models.Index(fields=["hostname"], name="worker_instances_live_idx", condition=models.Q(state="running"))
        ]

    def __str__(self) -> str:
        return self.id

    def beat(self, now: datetime) -> None:
        self.heartbeat_at = now
        with writing():
            WorkerInstance.objects.filter(pk=self.pk).update(heartbeat_at=now)

    def describe(self, version: str) -> None:
        """The gateway version the daemon runs, recorded once it runs (`system status` lists it)."""
        self.version = version
        with writing():
            WorkerInstance.objects.filter(pk=self.pk).update(version=version)

    def leave(self) -> None:
        """The row of a one-off claimant (a CLI `plugin run`), removed when it ends: it is there
        only so that, should its process die mid-job, recovery sees its claims as a dead
        worker's at once. Kept as `stopped`, every CLI call left a row among the daemons."""
        with writing():
            WorkerInstance.objects.filter(pk=self.pk).delete()

    def stop(self, now: datetime) -> None:
        self.state, self.stopped_at = WorkerState.STOPPED, now
        with writing():
            self.save(update_fields=["state", "stopped_at"])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PluginHealth(models.TextChoices):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


class PluginInstanceRecordQuerySet(models.QuerySet["PluginInstanceRecord"]):
    def init_started(self, name: str, *, fingerprint: str, job_id: str) -> None:
        """`init` was enqueued for this fingerprint of the plugin: its health is unknown until it ends."""
        with writing():
            self.update_or_create(
                name=name,
                defaults={"fingerprint": fingerprint, "init_job_id": job_id, "health": PluginHealth.UNKNOWN},
            )

    def init_finished(self, name: str, *, error: str | None, now: datetime) -> None:
        """Called by the completion of the plugin's `init` job, in its transaction (spec §5.2)."""
        with writing():
            self.filter(name=name).update(
                health=PluginHealth.UNHEALTHY if error else PluginHealth.HEALTHY, last_error=error, updated_at=now
            )

    def health_answered(self, name: str, *, error: str | None, now: datetime) -> None:
        """Called by the completion of a `health` command of the plugin, in its transaction: its
        health is what it last said, whoever asked (`plugin list --check`, a schedule, an agent)."""
        with writing():
            self.update_or_create(
                name=name,
                defaults={
                    "health": PluginHealth.UNHEALTHY if error else PluginHealth.HEALTHY,
                    "last_error": error,
                    "updated_at": now,
                },
            )


class PluginInstanceRecord(models.Model):
    """Per configured plugin: the fingerprint `init` last ran for, and what it or the plugin's
    last `health` answer said."""

    name = models.CharField(primary_key=True, max_length=200)
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    health = models.CharField(max_length=16, choices=PluginHealth.choices, default=PluginHealth.UNKNOWN)
    init_job_id = models.CharField(max_length=36, null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = PluginInstanceRecordQuerySet.as_manager()

    class Meta:
        db_table = "plugin_instances"

    def __str__(self) -> str:
        return f"{self.name} ({self.health})"
