"""`system status`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import DuctileCommand
from gateway.database import describe_database
from gateway.reports import queue_status
from ledger.models import PluginInstanceRecord
from ledger.models.workers import PluginHealth


class Command(DuctileCommand):
    help = "System: `system status`."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        status = actions.add_parser("status", help="config, database, plugins, queue and live workers")
        self.add_json(status)

    def handle(self, *args: Any, **options: Any) -> None:
        runtime = self.open_ledger()
        registry = runtime.registry
        queue = queue_status(lease_ttl=runtime.config.service.lease_ttl)
        unhealthy = dict(
            PluginInstanceRecord.objects.filter(health=PluginHealth.UNHEALTHY).values_list("name", "last_error")
        )
        data = {
            "status": "ok" if not unhealthy and not registry.skipped else "degraded",
            "config_dir": str(runtime.config.config_dir),
            "database": describe_database(),
            "service": runtime.config.service.name,
            "plugins_loaded": len(registry.instances),
            "plugins_disabled": sorted(registry.disabled),
            "plugins_skipped": dict(registry.skipped),
            "plugins_unhealthy": unhealthy,
            "daemon_running": bool(queue["workers"]),
            **queue,
        }

        def text() -> str:
            lines = [
                f"status: {data['status']}",
                f"config: {data['config_dir']}",
                f"database: {data['database']}",
                f"plugins: {data['plugins_loaded']} loaded, {len(data['plugins_disabled'])} disabled, "
                f"{len(data['plugins_skipped'])} skipped",
            ]
            lines += [f"  skipped {n}: {r}" for n, r in data["plugins_skipped"].items()]
            lines += [f"  unhealthy {n}: {e}" for n, e in unhealthy.items()]
            lines.append("queue: " + ", ".join(f"{k} {v}" for k, v in data["queue"].items()))
            lines.append(
                f"workers: {len(data['workers'])} live"
                + "".join(f"\n  {w['id']} ({w['threads']} threads)" for w in data["workers"])
            )
            return "\n".join(lines)

        self.emit(data, text)
