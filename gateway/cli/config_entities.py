"""The original's config editing nouns: `config plugin list|show|set`, `config route
list|add|remove`, `config webhook list|add`, and `config backup|restore` (the same archive and
restore as `system backup --scope config` and `system restore`). Each change goes through
gateway.operations.config_changes: validated as the whole config would load, written atomically,
re-sealed, rolled back whole if the result does not load."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gateway.cli.backups import run_backup, run_restore
from gateway.cli.base import EXIT_USAGE, DuctileCommand, Exit
from gateway.config.loader import load_config_tree
from gateway.operations.config_changes import FileChange, plan_append, plan_remove

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.core.management.base import CommandParser

    from gateway.runtime import Runtime

ROUTE_KEY = ("routes",)
ENDPOINTS_KEY = ("webhooks", "endpoints")
BACKUPS = "backups"  # `config backup`'s default place, under the config directory: never archived again


class Command(Protocol):
    """What these actions use of the `config` command (gateway/management/commands/config.py),
    named here so that this helper of the command does not import the command: the command
    imports it (no import circle, docs/architecture.md)."""

    config_dir: Path

    def add_json(self, parser: CommandParser) -> None: ...

    def emit(self, data: Any, text: Callable[[], str] | str, *, reveal: bool = False) -> None: ...

    def runtime(self) -> Runtime: ...

    def show(self, entity: str | None) -> None: ...

    def set_key(self, assignment: str, *, apply_it: bool) -> None: ...

    def planned(self, plan: Any) -> Any: ...

    def applied(self, changes: list[FileChange], config_dir: Path | None = None) -> list[Path]: ...


def add_entity_parsers(actions: Any, command: Command) -> None:
    plugin = actions.add_parser("plugin", help="configured plugins: `plugin list|show NAME|set NAME PATH VALUE`")
    plugin_actions = plugin.add_subparsers(dest="plugin_action", required=True, metavar="ACTION")
    command.add_json(
        plugin_actions.add_parser("list", help="every discovered plugin, configured or not, and its commands")
    )
    show = plugin_actions.add_parser("show", help="one plugin's resolved config (as `config show plugin:NAME`)")
    show.add_argument("name")
    command.add_json(show)
    set_ = plugin_actions.add_parser(
        "set", help="set one key of a plugin's config (as `config set plugins.NAME.PATH=VALUE`)"
    )
    set_.add_argument("name")
    set_.add_argument("path", help="a key under the plugin: enabled, timeout, config.message, schedules.0.every, …")
    set_.add_argument("value", help="YAML: false, 3, 5m, [a, b], {k: v}")
    set_.add_argument("--dry-run", action="store_true", help="show the change and its validation; write nothing")
    command.add_json(set_)

    route = actions.add_parser("route", help="plugin-to-plugin routes: `route list|add|remove --from --event --to`")
    route_actions = route.add_subparsers(dest="route_action", required=True, metavar="ACTION")
    command.add_json(route_actions.add_parser("list", help="every route, with the file defining it"))
    for mode in ("add", "remove"):
        change = route_actions.add_parser(mode, help=f"{mode} a route")
        change.add_argument("--from", dest="source", required=True, metavar="PLUGIN", help="the emitting plugin")
        change.add_argument("--event", required=True, metavar="TYPE", help="the event type it emits")
        change.add_argument("--to", dest="target", required=True, metavar="PLUGIN", help="the plugin it routes to")
        if mode == "add":
            change.add_argument("--command", help="the target's command (default: handle)")
        change.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
        command.add_json(change)

    webhook = actions.add_parser("webhook", help="webhook endpoints: `webhook list|add --path --plugin --secret-ref`")
    webhook_actions = webhook.add_subparsers(dest="webhook_action", required=True, metavar="ACTION")
    command.add_json(webhook_actions.add_parser("list", help="every endpoint (secrets are named, never shown)"))
    add = webhook_actions.add_parser("add", help="a new endpoint on the webhook listener")
    add.add_argument("--path", required=True, help="URL path, such as /webhook/github")
    add.add_argument("--plugin", required=True, help="the plugin each delivery runs")
    add.add_argument("--secret-ref", required=True, help="a tokens.yaml entry holding the signing secret")
    add.add_argument("--name", help="default: the path")
    add.add_argument("--command", help="the plugin's command (default: handle)")
    add.add_argument("--signature-header", default="X-Signature-256", help="default: X-Signature-256")
    add.add_argument("--max-body-size", help="e.g. 1MB")
    add.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
    command.add_json(add)

    backup = actions.add_parser(
        "backup", help="an archive of the config directory and the database snapshot (system backup --scope config)"
    )
    backup.add_argument("--to", dest="to", metavar="FILE", help=f"default: CONFIG_DIR/{BACKUPS}/config-STAMP.tar.gz")
    backup.add_argument("--dry-run", action="store_true", help="list what would be included and excluded")
    command.add_json(backup)
    restore = actions.add_parser("restore", help="an archive back as an instance in a new directory (system restore)")
    restore.add_argument("archive", metavar="FILE")
    restore.add_argument("--to", required=True, metavar="DIR", help="a directory that is absent or empty")
    restore.add_argument("--dry-run", action="store_true", help="show where everything would go")
    command.add_json(restore)


def run_entity(command: Command, action: str, options: dict[str, Any]) -> None:
    assert isinstance(command, DuctileCommand)  # as the config command is: backup and restore take any command
    if action == "plugin":
        _plugin(command, options)
    elif action == "route":
        _route(command, options)
    elif action == "webhook":
        _webhook(command, options)
    elif action == "backup":
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")  # two backups in one second: two names
        target = options["to"] or str(command.config_dir / BACKUPS / f"config-{stamp}.tar.gz")
        run_backup(command, target, "config", options["dry_run"])
    else:
        run_restore(command, options["archive"], options["to"], options["dry_run"])


def _plugin(command: Command, options: dict[str, Any]) -> None:
    action = options["plugin_action"]
    if action == "show":
        command.show(f"plugin:{options['name']}")
    elif action == "set":
        command.set_key(
            f"plugins.{options['name']}.{options['path']}={options['value']}", apply_it=not options["dry_run"]
        )
    else:
        runtime = command.runtime()
        configured = {p.uses for p in runtime.config.plugins.values()} | set(runtime.config.plugins)
        rows: list[dict[str, Any]] = [
            {
                "name": name,
                "configured": name in configured,
                "commands": sorted(f"{c.name}:{c.type}" for c in manifest.commands.values()),
            }
            for name, manifest in sorted(runtime.registry.discovery.manifests.items())
        ]
        roots = ", ".join(str(r) for r in runtime.config.plugin_roots)

        def text() -> str:
            lines = [f"Discovered plugins in {roots}:"]
            for r in rows:
                state = "configured" if r["configured"] else "not configured"
                lines.append(f"  {r['name']!s:20} {state:15} {', '.join(r['commands'])}")
            return "\n".join(lines)

        command.emit({"plugin_roots": [str(r) for r in runtime.config.plugin_roots], "plugins": rows}, text)


def _route(command: Command, options: dict[str, Any]) -> None:
    action = options["route_action"]
    merged = load_config_tree(command.config_dir, os.environ)
    routes = [r for r in merged.data.get("routes") or [] if isinstance(r, dict)]
    if action == "list":
        listed = [
            {**route, "defined_in": str(origin.file) if (origin := merged.origin_of(("routes", i))) else None}
            for i, route in enumerate(routes)
        ]
        shown = "\n".join(
            f"  {r['from']}:{r['event_type']} -> {r['to']}" + (f".{r['command']}" if r.get("command") else "")
            for r in listed
        )
        command.emit({"routes": listed}, shown or "(no routes)")
        return
    route = {"from": options["source"], "event_type": options["event"], "to": options["target"]}
    same = [i for i, r in enumerate(routes) if {k: r.get(k) for k in route} == route]
    label = f"{route['from']}:{route['event_type']} -> {route['to']}"
    if action == "add":
        if same:
            raise Exit(EXIT_USAGE, f"route {label} exists already")
        if options["command"]:
            route["command"] = options["command"]
        change = command.planned(lambda d, e: plan_append(d, ROUTE_KEY, route, e))
    else:
        if not same:
            raise Exit(EXIT_USAGE, f"no route {label}")
        change = command.planned(lambda d, e: plan_remove(d, ("routes", same[0]), e))
    _changed(command, change, options["dry_run"], {"action": action, "route": route}, f"route {label}")


def _webhook(command: Command, options: dict[str, Any]) -> None:
    merged = load_config_tree(command.config_dir, os.environ)
    webhooks = merged.data.get("webhooks")
    endpoints = webhooks.get("endpoints") or [] if isinstance(webhooks, dict) else []
    if options["webhook_action"] == "list":
        # An endpoint names its secret (secret_ref: a tokens.yaml entry), never holds it (the loader
        # refuses an inline one); what is printed is scrubbed of the config's secrets all the same.
        listed = [dict(e) for e in endpoints if isinstance(e, dict)]

        def text() -> str:
            lines = []
            for e in listed:
                lines += [
                    f"{e.get('name') or e.get('path')}",
                    f"  Path: {e.get('path')}",
                    f"  Plugin: {e.get('plugin')}",
                ]
                lines.append(f"  SecretRef: {e.get('secret_ref')}")
            return "\n".join(lines) or "(no webhook endpoints)"

        command.emit({"webhooks": listed}, text)
        return
    endpoint = {"path": options["path"], "plugin": options["plugin"], "secret_ref": options["secret_ref"]}
    for key in ("name", "command", "signature_header", "max_body_size"):
        if options[key]:
            endpoint[key] = options[key]
    change = command.planned(lambda d, e: plan_append(d, ENDPOINTS_KEY, endpoint, e))
    label = f"webhook {endpoint['path']} -> {endpoint['plugin']}"
    _changed(command, change, options["dry_run"], {"action": "add", "webhook": endpoint}, label)


def _changed(command: Command, change: FileChange, dry_run: bool, data: dict[str, Any], what: str) -> None:
    sealed: list[Path] = [] if dry_run else command.applied([change])
    body = {
        **data,
        "file": str(change.path),
        "dry_run": dry_run,
        "diff": change.diff(),
        "resealed": [str(p) for p in sealed],
    }
    verb = f"would {data['action']}" if dry_run else {"add": "added", "remove": "removed"}[data["action"]]
    tail = "" if dry_run else "\nnext: `ductile system reload` applies it to a running gateway"
    command.emit(body, f"{change.diff()}{verb} {what} in {change.path}{tail}")
