"""The console's config page: the resolved configuration redacted as `GET /config/view` shows
it, what the `.checksums` seal says of each file, and every configured plugin with its manifest,
commands and health, or why it was skipped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.errors import ConfigError
from gateway.config.sandbox import EGRESS
from gateway.console.render import json_tree
from gateway.plugins.manifest import Manifest
from gateway.reports import seal_status
from gateway.reports.redaction import config_view
from gateway.runtime import RUNTIME
from ledger.models import EgressHost, PluginInstanceRecord


@dataclass(frozen=True)
class PluginRow:
    name: str
    uses: str
    status: str  # loaded | disabled | skipped
    why: str  # a skipped plugin's reason
    manifest: Manifest | None
    parallelism: int | None
    health: PluginInstanceRecord | None
    sandbox: str  # the profile its jobs run under (gateway.config.sandbox.Sandbox.describe)
    # The hosts its jobs asked the egress proxy for, summed (EgressHost.objects.by_plugin).
    egress: list[dict[str, Any]]


def config_context() -> dict[str, Any]:
    try:
        runtime = RUNTIME.get()
    except ConfigError as exc:
        # The page still says where the config is and what is wrong with it.
        return {
            "config_dir": RUNTIME.config_dir,
            "problems": [str(p) for p in exc.problems],
            "files": seal_status(RUNTIME.config_dir) if RUNTIME.config_dir else [],
        }
    registry = runtime.registry
    health = PluginInstanceRecord.objects.in_bulk(list(runtime.config.plugins))
    rows = []
    for name, plugin in sorted(runtime.config.plugins.items()):
        instance = registry.instances.get(name) or registry.disabled.get(name)
        status = "loaded" if name in registry.instances else "disabled" if name in registry.disabled else "skipped"
        rows.append(
            PluginRow(
                name=name,
                uses=plugin.uses,
                status=status,
                why=registry.skipped.get(name, ""),
                manifest=instance.manifest if instance else registry.discovery.manifests.get(plugin.uses),
                parallelism=instance.shown_parallelism if instance else None,
                health=health.get(name),
                sandbox=plugin.sandbox.describe(),
                egress=EgressHost.objects.by_plugin(name) if plugin.sandbox.network == EGRESS else [],
            )
        )
    return {
        "config_dir": runtime.config.config_dir,
        "loaded_at": runtime.loaded_at,
        "service": runtime.config.service.name,
        "plugins": rows,
        "files": seal_status(runtime.config.config_dir),
        "resolved": json_tree(config_view(runtime.config.document)),
        "warnings": [str(w) for w in (*runtime.config.warnings, *registry.warnings)],
    }


def lease_ttl() -> float:
    """How long a live worker may go without a heartbeat (`service.lease_ttl`)."""
    try:
        return RUNTIME.get().config.service.lease_ttl
    except ConfigError:
        return 60.0
