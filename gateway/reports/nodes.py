"""The cluster's nodes, as `system status`, `GET /system/nodes`, the audit console and the dashboard
list them: each worker daemon's `worker_instances` row (host, pid, group, version, slots, started,
last heartbeat), and each process that claims nothing but runs the API, a scheduler or
housekeeping (gateway.daemon.presence) with its roles, live or lost. And the plugins with queued
jobs that no live node serves, which would otherwise wait without a word: `system doctor` finds
them, `/healthz` names them (`plugins_unserved`) and the dashboard warns of them.

A node is live while its heartbeat is younger than a lease (`service.lease_ttl`, what recovery
waits before taking its jobs over); past that it is lost, as is one that recovery found dead on
its host. A stopped node (drained and gone on purpose) is not listed, nor one not heard from for
a day: a row is never removed, and a container's hostname is new at every start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min

from ledger.models import Job, WorkerInstance
from ledger.models.workers import CLI, WORKERS, WorkerState
from ledger.timestamps import rfc3339
from pipelines.dsl import CORE_HOPS

# How long a lost node stays listed after its last heartbeat.
LISTED_FOR = timedelta(days=1)
LIVE, LOST = "live", "lost"


@dataclass(frozen=True)
class NodesReport:
    nodes: list[dict[str, Any]]
    unserved: list[dict[str, Any]]

    @property
    def live(self) -> list[dict[str, Any]]:
        return [node for node in self.nodes if node["liveness"] == LIVE]

    @property
    def live_workers(self) -> list[dict[str, Any]]:
        """The live nodes that claim jobs (the `workers` role)."""
        return [node for node in self.live if WORKERS in node["roles"]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "live": len(self.live),
            "lost": len(self.nodes) - len(self.live),
            "unserved": self.unserved,
        }


def nodes_report(now: datetime, lease_ttl: float) -> NodesReport:
    return NodesReport(node_list(now, lease_ttl), unserved_plugins(now, lease_ttl))


def node_list(now: datetime, lease_ttl: float) -> list[dict[str, Any]]:
    """Live nodes first, then lost ones; each by host, then the oldest first."""
    fresh = now - timedelta(seconds=lease_ttl)
    rows = (
        WorkerInstance.objects.heard_from(now - LISTED_FOR)
        .exclude(state=WorkerState.STOPPED)
        .exclude(roles=CLI)
        .order_by("hostname", "started_at", "id")
    )
    nodes = [
        node(row, LIVE if row.state == WorkerState.RUNNING and row.heartbeat_at >= fresh else LOST) for row in rows
    ]
    return sorted(nodes, key=lambda n: n["liveness"] != LIVE)


def node(row: WorkerInstance, liveness: str) -> dict[str, Any]:
    return {
        "id": row.id,
        "hostname": row.hostname,
        "pid": row.pid,
        # What it runs: `workers` (a worker daemon), or a supervisor's or a standalone
        # scheduler's own roles (gateway.daemon.presence).
        "roles": row.roles.split(","),
        "group": row.worker_group or None,
        # What it claims: its group's plugins or its --plugins; null for every plugin.
        "plugins": (row.plugins.split(",") if row.plugins else None) if row.roles == WORKERS else [],
        "version": row.version or None,
        "slots": row.threads,
        "state": row.state,
        "liveness": liveness,
        "started_at": rfc3339(row.started_at),
        "heartbeat_at": rfc3339(row.heartbeat_at),
    }


def unserved_plugins(now: datetime, lease_ttl: float) -> list[dict[str, Any]]:
    """Each plugin with queued jobs that no live node claims: how many wait, since when. Nothing
    is read of the queue while some live node claims every plugin, the usual case."""
    served = WorkerInstance.objects.serving(now, lease_ttl)
    if served is None:
        return []
    # Every live node, of a group or not, runs the core hops (WorkerDaemon._caps).
    served = served | CORE_HOPS if served else served
    waiting = (
        Job.objects.queued()
        .exclude(plugin__in=served)
        .values("plugin")
        .annotate(queued=Count("id"), oldest=Min("created_at"))
        .order_by("plugin")
    )
    return [
        {"plugin": row["plugin"], "queued": row["queued"], "oldest_queued_at": rfc3339(row["oldest"])}
        for row in waiting
    ]
