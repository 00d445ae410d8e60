"""`system plugin-facts PLUGIN [--fact-type T] [--limit N]`: a plugin's newest durable facts
(the append-only `plugin_facts` rows), as the original's command shows them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.db.models import F

from gateway.cli.base import EXIT_USAGE, DuctileCommand, Exit
from gateway.reports import ts
from ledger.models import PluginFact

DEFAULT_LIMIT = 20


def add_plugin_facts(actions: Any, command: DuctileCommand) -> None:
    facts = actions.add_parser("plugin-facts", help="a plugin's newest append-only facts (plugin_facts)")
    facts.add_argument("plugin", help="a configured plugin (or alias)")
    facts.add_argument("--fact-type", help="only facts of this type")
    facts.add_argument("--limit", type=_positive, default=DEFAULT_LIMIT, help=f"rows (default {DEFAULT_LIMIT})")
    command.add_json(facts)


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("limit must be greater than zero")
    return value


def run_plugin_facts(command: DuctileCommand, plugin: str, fact_type: str | None, limit: int) -> None:
    runtime = command.open_ledger()
    if plugin not in runtime.config.plugins:
        known = ", ".join(sorted(runtime.config.plugins)) or "none configured"
        raise Exit(EXIT_USAGE, f"unknown plugin {plugin!r} (configured: {known})")
    rows = PluginFact.objects.filter(plugin_name=plugin)
    if fact_type:
        rows = rows.filter(fact_type=fact_type)
    # Newest first by the plugin's own sequence (spec 000's operator query): an unsequenced row last.
    rows = rows.order_by(F("seq").desc(nulls_last=True), "-created_at")
    facts = [
        {
            "id": row.id,
            "seq": row.seq,
            "plugin": row.plugin_name,
            "fact_type": row.fact_type,
            "job_id": row.job_id,
            "command": row.command,
            "fact": row.fact_json,
            "created_at": ts(row.created_at),
        }
        for row in rows[:limit]
    ]
    data: dict[str, Any] = {"plugin": plugin, **({"fact_type": fact_type} if fact_type else {}), "facts": facts}

    def text() -> str:
        lines = [f"Plugin facts for {plugin}"] + ([f"Fact type filter: {fact_type}"] if fact_type else [])
        if not facts:
            return "\n".join([*lines, "No facts found."])
        for fact in facts:
            lines += ["", f"{fact['created_at']}  {fact['fact_type']}  job={fact['job_id']}  command={fact['command']}"]
            lines.append(json.dumps(fact["fact"], sort_keys=True))
        return "\n".join(lines)

    command.emit(data, text)
