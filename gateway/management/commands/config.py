"""`config check | lock | show | get | set | snapshots | init | token create|list|inspect|rehash|delete |
scope add|remove|set|validate | plugin | route | webhook | backup | restore` (Operator Handbook,
"Config"; the last five in gateway/cli/config_entities.py).

The `config lock` ritual: `config check` (validate) → `config lock` (authorize: rewrite the seal)
→ `system reload` (apply without a restart).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import CommandParser

from gateway.cli.base import EXIT_CONFIG, EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit
from gateway.cli.config_entities import add_entity_parsers, run_entity
from gateway.cli.config_schema import add_schema_parsers, run_schema, run_validate
from gateway.cli.nouns import NOUNS
from gateway.config.address import AddressError, lookup, names, resolve
from gateway.config.durations import format_duration
from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.frozen import thaw
from gateway.config.integrity import CHECKSUMS, LockReport
from gateway.config.loader import load_config_tree
from gateway.config.redaction import redact
from gateway.operations.config_changes import (
    SCOPE_MODES,
    ChangeRefused,
    FileChange,
    apply,
    make_directory,
    plan_init,
    plan_scope,
    plan_set,
    plan_token,
    plan_token_delete,
    plan_token_rehash,
    registry_token,
    registry_tokens,
    scope_problems,
)
from gateway.plugins.seal import lock_config
from gateway.reports import seal_status
from gateway.reports.redaction import config_view
from gateway.runtime import RUNTIME, Runtime, build_runtime
from ledger.models import ConfigSnapshot
from ledger.timestamps import rfc3339

BUNDLED_PLUGINS = Path(__file__).resolve().parents[3] / "plugins"


class Command(DuctileCommand):
    help = NOUNS["config"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        check = actions.add_parser("check", help="validate syntax, schema, semantics, integrity and plugin references")
        check.add_argument(
            "--strict",
            action="store_true",
            help="strict mode whatever service.strict_mode says (every admission gate), and any warning fails",
        )
        self.add_json(check)
        lock_ = actions.add_parser("lock", help="authorize the config as it is now: rewrite the .checksums seal")
        lock_.add_argument("--dry-run", action="store_true", help="show what would be sealed; write nothing")
        self.add_json(lock_)
        show = actions.add_parser("show", help="the resolved config, or one entity (plugin:NAME, pipeline:NAME, …)")
        show.add_argument("entity", nargs="?", help="plugin:NAME, pipeline:NAME, webhook:NAME, plugin:* or a key path")
        self.add_json(show)
        get = actions.add_parser("get", help="one value by dot path (plugins.echo.enabled or plugin:echo.enabled)")
        get.add_argument("path")
        self.add_json(get)
        set_ = actions.add_parser("set", help="change one key: validated first, atomic, re-sealed if sealed")
        set_.add_argument("assignment", metavar="PATH=VALUE")
        mode = set_.add_mutually_exclusive_group(required=True)
        mode.add_argument("--dry-run", action="store_true", help="show the change and its validation; write nothing")
        mode.add_argument("--apply", action="store_true", help="write the change")
        self.add_json(set_)
        snapshots = actions.add_parser(
            "snapshots", help="the configs the gateway started or reloaded on (config_snapshots), newest first"
        )
        snapshots.add_argument("fingerprint", nargs="?", help="show one, with its content: a fingerprint or its start")
        snapshots.add_argument("--limit", type=int, default=20, help="rows listed (default 20)")
        self.add_json(snapshots)
        init = actions.add_parser("init", help="write a valid, sealed starter config directory")
        init.add_argument("directory", nargs="?", help="default: the config directory (--config-dir)")
        init.add_argument("--dry-run", action="store_true", help="list the files; write nothing")
        self.add_json(init)
        token = actions.add_parser("token", help="API tokens: `token create|list|inspect NAME|rehash NAME|delete NAME`")
        token_actions = token.add_subparsers(dest="token_action", required=True, metavar="ACTION")
        create = token_actions.add_parser("create", help="a new scoped token; prints its secret once")
        create.add_argument("--name", required=True)
        create.add_argument("--scopes", required=True, help="comma-separated: *, plugin:rw, jobs:ro, echo:rw, …")
        create.add_argument("--description", default="")
        create.add_argument("--dry-run", action="store_true", help="show the files it would write; write nothing")
        self.add_json(create)
        self.add_json(token_actions.add_parser("list", help="the token registry (tokens.yaml): names, scopes, hashes"))
        inspect = token_actions.add_parser("inspect", help="one registry token: its scope file, hash check, scopes")
        inspect.add_argument("name")
        self.add_json(inspect)
        rehash = token_actions.add_parser(
            "rehash", help="authorize a token's hand-edited scope file: record its current hash, re-seal"
        )
        rehash.add_argument("name")
        rehash.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
        self.add_json(rehash)
        delete = token_actions.add_parser("delete", help="remove a registry token (its scope file is kept)")
        delete.add_argument("name")
        delete.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
        self.add_json(delete)
        scope = actions.add_parser(
            "scope", help="a registry token's scopes: `scope add|remove|set NAME SCOPES`, `validate`"
        )
        scope_actions = scope.add_subparsers(dest="scope_action", required=True, metavar="ACTION")
        for scope_mode in SCOPE_MODES:
            change = scope_actions.add_parser(
                scope_mode, help=f"{scope_mode} scopes of a token's scope file (re-hashed, re-sealed)"
            )
            change.add_argument("name", help="a token of the registry (tokens.yaml)")
            change.add_argument("scopes", metavar="SCOPES", help="comma-separated: plugin:ro, echo:rw, jobs:ro, *, …")
            change.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
            self.add_json(change)
        validate = scope_actions.add_parser("validate", help="whether a scope can be granted in this config")
        validate.add_argument("scope")
        self.add_json(validate)
        add_entity_parsers(actions, self)
        add_schema_parsers(actions, self)

    def handle(self, *args: Any, **options: Any) -> None:
        self.verbose = options.get("verbosity", 0) > 0
        self.config_dir = RUNTIME.config_dir or Path(os.environ["DUCTILE_CONFIG_DIR"])
        action = options["action"]
        if action == "check":
            self.check_config(options["strict"])
        elif action == "lock":
            self.lock_config(options["dry_run"])
        elif action == "show":
            self.show(options["entity"])
        elif action == "get":
            self.get(options["path"])
        elif action == "set":
            self.set_key(options["assignment"], apply_it=options["apply"])
        elif action == "snapshots":
            self.snapshots(options["fingerprint"], options["limit"])
        elif action == "init":
            self.init(Path(options["directory"]).resolve() if options["directory"] else self.config_dir, options)
        elif action == "scope":
            self.scope(options)
        elif action in ("plugin", "route", "webhook", "backup", "restore"):
            run_entity(self, action, options)
        elif action == "schema":
            run_schema(self, options["name"])
        elif action == "validate":
            run_validate(self, options["file"], options["name"])
        elif options["token_action"] == "create":
            self.token_create(options["name"], _listed(options["scopes"]), options["description"], options["dry_run"])
        elif options["token_action"] == "list":
            self.token_list()
        elif options["token_action"] == "inspect":
            self.token_inspect(options["name"])
        elif options["token_action"] == "rehash":
            self.token_rehash(options["name"], options["dry_run"])
        else:
            self.token_delete(options["name"], options["dry_run"])

    # -- check and lock ------------------------------------------------------------------------

    def check_config(self, strict: bool) -> None:
        errors: list[ConfigProblem] = []
        warnings: list[str] = []
        try:
            runtime = build_runtime(self.config_dir, strict=strict)
        except ConfigError as exc:
            errors = list(exc.problems)
        else:
            found = [*runtime.config.warnings, *runtime.registry.warnings]
            found += [ConfigProblem(problem) for problem in runtime.tokens.problems]
            if strict:
                # `--strict` fails on any warning, as the original's (`--fail-on-warnings`):
                # each is reported as an error, where it was found.
                errors = found
            else:
                warnings = [str(w) for w in found]
            strict = runtime.config.service.strict_mode
        files = seal_status(self.config_dir)
        data = {
            "valid": not errors,
            "strict": strict,
            "config_dir": str(self.config_dir),
            "errors": [e.as_dict() for e in errors],
            "warnings": warnings,
            "files": files,
        }

        def text() -> str:
            if errors:
                lines = [f"Configuration invalid ({len(errors)} error(s)):"] + [f"  ERROR {e}" for e in errors]
            else:
                lines = [f"Configuration valid ({len(warnings)} warning(s))" + (" [strict]" if strict else "")]
            lines += [f"  WARN  {w}" for w in warnings]
            if self.verbose:
                lines += [f"  {f['status']:11} {f['tier']:13} {f['path']}" for f in files]
            return "\n".join(lines)

        self.emit(data, text)
        if errors:
            raise SystemExit(EXIT_CONFIG)

    def lock_config(self, dry_run: bool) -> None:
        report, notes = lock_config(self.config_dir, dry_run=dry_run)
        emit_lock_report(self, report, notes, dry_run)

    # -- reading -------------------------------------------------------------------------------

    def snapshots(self, fingerprint: str | None, limit: int) -> None:
        """`config_snapshots`, read from the ledger: what ran when, never a secret (the rows are
        redacted when written: gateway/daemon/config_snapshots.py)."""
        self.open_ledger()
        rows = ConfigSnapshot.objects.order_by("-loaded_at", "-id")
        if fingerprint is None:
            listed = [_snapshot(row, content=False) for row in rows[: max(limit, 0)]]
            lines = [f"{r['loaded_at']}  {r['reason']:6}  {r['fingerprint'][:23]}  {r['loaded_by']}" for r in listed]
            self.emit({"snapshots": listed}, "\n".join(lines) or "(none yet: `system start` records its config)")
            return
        found = list(rows.filter(fingerprint__startswith=fingerprint)[:2])
        if len(found) != 1:
            what = "no config snapshot" if not found else "more than one config snapshot"
            raise Exit(EXIT_FAILED, f"{what} with a fingerprint starting {fingerprint!r}")
        data = _snapshot(found[0], content=True)
        self.emit(data, lambda: _yaml_text(data))

    def show(self, entity: str | None) -> None:
        runtime = self.runtime()
        document = thaw(runtime.config.document)
        view = config_view(runtime.config.document)
        if entity is None:
            data = {**view, "service": self._service(runtime)}
            self.emit(data, lambda: _yaml_text(data))
            return
        address = self._resolve(entity, document)
        if address.wildcard:
            listed = names(document, address.path)
            self.emit({"entity": entity, "names": listed}, "\n".join(listed) or "(none)")
            return
        if len(address.path) == 2 and address.path[0] == "plugins":
            data = self._plugin(runtime, str(address.path[1]))
        else:
            data = self._value(view, address.path, entity)
        self.emit(data, lambda: _yaml_text(data))

    def get(self, path: str) -> None:
        # The merged document, not the typed config: `get` must work while a value is being fixed.
        merged = load_config_tree(self.config_dir, os.environ)
        address = self._resolve(path, merged.data)
        value = self._value(config_view(merged.data), address.path, path)
        origin = merged.origin_of(address.path)
        where = f"{origin.file}:{origin.line}" if origin and origin.line else str(origin.file) if origin else None
        data = {"path": path, "value": value, "defined_in": where}

        def text() -> str:
            shown = value if isinstance(value, str) else json.dumps(value)
            return f"{shown}\n  (defined in {where})" if self.verbose and where else shown

        self.emit(data, text)

    def _resolve(self, text: str, document: dict[str, Any]) -> Any:
        try:
            return resolve(text, document)
        except AddressError as exc:
            raise Exit(EXIT_USAGE, str(exc)) from exc

    @staticmethod
    def _value(view: dict[str, Any], path: tuple[str | int, ...], text: str) -> Any:
        try:
            return lookup(view, path)
        except KeyError as exc:
            raise Exit(EXIT_FAILED, f"{text}: no such key ({exc.args[0]} is not set)") from exc

    @staticmethod
    def _service(runtime: Runtime) -> dict[str, Any]:
        """`service` with every default filled in (what the gateway actually runs with)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(runtime.config.service):
            value = getattr(runtime.config.service, f.name)
            is_duration = f.name in ("tick_interval", "dedupe_ttl", "lease_ttl") or f.name.endswith("_retention")
            out[f.name] = format_duration(value) if is_duration else thaw(value)
        return out

    @staticmethod
    def _plugin(runtime: Runtime, name: str) -> dict[str, Any]:
        plugin = runtime.config.plugins[name]
        registry = runtime.registry
        instance = registry.instances.get(name) or registry.disabled.get(name)
        status = "loaded" if name in registry.instances else "disabled" if name in registry.disabled else "skipped"
        document = thaw(runtime.config.document)["plugins"][name]
        return {
            "name": name,
            "uses": plugin.uses,
            "status": status,
            "reason": registry.skipped.get(name),
            "enabled": plugin.enabled,
            "parallelism": instance.parallelism if instance else plugin.parallelism,
            "node_parallelism": instance.node_parallelism if instance else plugin.node_parallelism,
            "timeouts": {k: format_duration(v) for k, v in plugin.timeouts.items()},
            "retry": {
                "max_attempts": plugin.retry.max_attempts,
                "backoff_base": format_duration(plugin.retry.backoff_base),
            },
            "circuit_breaker": {
                "threshold": plugin.circuit_breaker.threshold,
                "reset_after": format_duration(plugin.circuit_breaker.reset_after),
            },
            "max_outstanding_polls": plugin.max_outstanding_polls,
            "notify_on_complete": plugin.notify_on_complete,
            "schedules": redact(document.get("schedules") or []),
            "config": redact(thaw(plugin.config)),
            "manifest": (
                {
                    "name": instance.manifest.name,
                    "version": instance.manifest.version,
                    "commands": list(instance.manifest.commands),
                }
                if instance
                else None
            ),
            "defined_in": str(plugin.source) if plugin.source else None,
        }

    # -- changing ------------------------------------------------------------------------------

    def set_key(self, assignment: str, *, apply_it: bool) -> None:
        try:
            change, path = plan_set(self.config_dir, assignment, os.environ)
        except ChangeRefused as exc:
            raise Exit(EXIT_USAGE, str(exc)) from exc
        except ConfigError as exc:
            raise _invalid(exc) from exc
        sealed = self.applied([change]) if apply_it else []
        data = {
            "path": ".".join(map(str, path)),
            "file": str(change.path),
            "applied": apply_it,
            "dry_run": not apply_it,
            "resealed": [str(p) for p in sealed],
            "diff": change.diff(),
            "valid": True,
        }

        def text() -> str:
            head = f"{'changed' if apply_it else 'would change'} {change.path} (the result validates)"
            tail = f"\nre-sealed {change.path} in {CHECKSUMS}" if sealed else ""
            return f"{change.diff() or '(no change: the value is already set)'}\n{head}{tail}"

        self.emit(data, text)

    def init(self, directory: Path, options: dict[str, Any]) -> None:
        try:
            changes, secret = plan_init(directory, BUNDLED_PLUGINS)
        except ChangeRefused as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc
        dry_run = options["dry_run"]
        if not dry_run:
            make_directory(directory)
            self.applied(changes, directory)
        data = {
            "config_dir": str(directory),
            "dry_run": dry_run,
            "files": [str(c.path) for c in changes],
            "admin_token": None if dry_run else secret,
            "admin_token_env": "DUCTILE_TOKEN_ADMIN",
        }

        def text() -> str:
            lines = [f"{'would write' if dry_run else 'wrote'} {c.path}" for c in changes]
            if not dry_run:
                lines += [
                    f"sealed {directory / CHECKSUMS}; `ductile --config-dir {directory} config check` passes",
                    f"admin API token (shown once; stored in {directory / '.env'} as DUCTILE_TOKEN_ADMIN): {secret}",
                ]
            return "\n".join(lines)

        self.emit(data, text, reveal=True)

    def token_create(self, name: str, scopes: list[str], description: str, dry_run: bool) -> None:
        try:
            changes, secret, variable = plan_token(self.config_dir, name, scopes, description, os.environ)
        except ChangeRefused as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc
        if not dry_run:
            self.applied(changes)
        data = {
            "name": name,
            "scopes": scopes,
            "dry_run": dry_run,
            "env_var": variable,
            "token": None if dry_run else secret,
            "files": [str(c.path) for c in changes],
        }

        def text() -> str:
            lines = [f"{'would write' if dry_run else 'wrote'} {c.path}" for c in changes]
            if not dry_run:
                lines += [
                    f"token {name!r} (shown once; stored as {variable} in the config's .env): {secret}",
                    "next: `ductile system reload` makes a running gateway accept it",
                ]
            return "\n".join(lines)

        self.emit(data, text, reveal=True)

    def token_list(self) -> None:
        found = self.planned(lambda d, e: registry_tokens(d, e, check_seal=False))
        tokens = [t.report(self.config_dir) for t in found]

        def text() -> str:
            lines = [f"Tokens in {self.config_dir / 'tokens.yaml'}:"] if tokens else ["(no registry tokens)"]
            for t in tokens:
                check = "" if t["hash_matches"] or not t["scopes_file"] else "  (scope file does not match its hash)"
                lines.append(f"  {t['name']:20} {', '.join(t['scopes'] or []) or '-'}{check}")
            return "\n".join(lines)

        self.emit({"config_dir": str(self.config_dir), "tokens": tokens}, text)

    def token_inspect(self, name: str) -> None:
        token = self.planned(lambda d, e: registry_token(d, name, e, check_seal=False))
        data = {**token.report(self.config_dir), "config_dir": str(self.config_dir)}

        def text() -> str:
            lines = [f"Token: {data['name']}", f"Created: {data['created_at'] or '-'}", "Key: [redacted]"]
            lines += [f"Scope file: {data['scopes_file']}", f"Hash: {data['scopes_hash']}"]
            lines += [
                f"Current hash: {data['current_hash']}",
                f"Hash check: {'match' if data['hash_matches'] else 'mismatch'}",
            ]
            lines += ["Scopes:", *(f"  - {s}" for s in data["scopes"] or [])]
            if data["description"]:
                lines.append(f"Description: {data['description']}")
            return "\n".join(lines)

        self.emit(data, text)

    def token_rehash(self, name: str, dry_run: bool) -> None:
        changes, token, new_hash = self.planned(lambda d, e: plan_token_rehash(d, name, e))
        sealed = [] if dry_run else self.applied(changes)
        data = {
            "token": name,
            "old_hash": token.entry.get("scopes_hash"),
            "new_hash": new_hash,
            "dry_run": dry_run,
            "updated": str(token.file),
            "resealed": [str(p) for p in sealed],
        }
        verb = "would record" if dry_run else "recorded"
        self.emit(data, f"{verb} {new_hash} for token {name!r} (was {data['old_hash']}) in {token.file}")

    def token_delete(self, name: str, dry_run: bool) -> None:
        changes, token = self.planned(lambda d, e: plan_token_delete(d, name, e))
        sealed = [] if dry_run else self.applied(changes)
        data = {
            "deleted": name,
            "dry_run": dry_run,
            "files": [str(c.path) for c in changes],
            "scopes_file": token.entry.get("scopes_file"),
            "resealed": [str(p) for p in sealed],
        }
        verb = "would delete" if dry_run else "deleted"
        kept = f"; its scope file {data['scopes_file']} is kept" if data["scopes_file"] else ""
        tail = "" if dry_run else "\nnext: `ductile system reload` makes a running gateway refuse it"
        self.emit(data, f"{verb} token {name!r} from {token.file}{kept}{tail}")

    def scope(self, options: dict[str, Any]) -> None:
        mode = options["scope_action"]
        if mode == "validate":
            plugins = list(self.runtime().config.plugins)
            problems = scope_problems([options["scope"]], plugins)
            self.emit(
                {"scope": options["scope"], "valid": not problems, "problems": problems},
                "\n".join([f"Scope: {options['scope']}", *([f"invalid: {p}" for p in problems] or ["valid"])]),
            )
            if problems:
                raise SystemExit(EXIT_FAILED)
            return
        name, dry_run = options["name"], options["dry_run"]
        changes, scopes, token = self.planned(lambda d, e: plan_scope(d, name, mode, _listed(options["scopes"]), e))
        sealed = [] if dry_run else self.applied(changes)
        data = {
            "token": name,
            "mode": mode,
            "scopes": scopes,
            "scopes_file": token.entry.get("scopes_file"),
            "dry_run": dry_run,
            "diff": "".join(c.diff() for c in changes),
            "resealed": [str(p) for p in sealed],
        }
        verb = "would set" if dry_run else "set"
        self.emit(data, f"{data['diff']}{verb} token {name!r} scopes: {', '.join(scopes)}")

    def planned(self, plan: Any) -> Any:
        """`plan(config_dir, environ)`, its refusals as exit 2, an unreadable config as exit 78."""
        try:
            return plan(self.config_dir, os.environ)
        except ChangeRefused as exc:
            raise Exit(EXIT_USAGE, str(exc)) from exc
        except ConfigError as exc:
            raise _invalid(exc) from exc

    def applied(self, changes: list[FileChange], config_dir: Path | None = None) -> list[Path]:
        try:
            return apply(config_dir or self.config_dir, changes, os.environ)
        except ConfigError as exc:
            raise _invalid(exc) from exc


def _listed(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _invalid(exc: ConfigError) -> Exit:
    return Exit(
        EXIT_CONFIG,
        "the change would leave the config invalid; nothing was written:\n" + str(exc),
        {"problems": [p.as_dict() for p in exc.problems]},
    )


def _yaml_text(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip()


def _snapshot(row: ConfigSnapshot, *, content: bool) -> dict[str, Any]:
    return {**row.as_dict(content=content), "loaded_at": rfc3339(row.loaded_at)}


def emit_lock_report(command: DuctileCommand, report: LockReport, notes: list[str], dry_run: bool) -> None:
    """What `config lock` and `plugin lock` sealed: files, plugin fingerprints, and why any plugin
    could not be fingerprinted."""
    data = {
        "seal": str(report.seal_path),
        "dry_run": dry_run,
        "written": report.written,
        "files": [{"path": str(f.path), "tier": str(f.tier), "change": f.change} for f in report.files],
        "removed": list(report.removed),
        "plugins": [{"name": p.name, "change": p.change} for p in report.plugins],
        "notes": notes,
    }

    def text() -> str:
        lines = [f"{f.change:9} {f.tier:13} {f.path}" for f in report.files]
        lines += [f"{'removed':9} {'':13} {p}" for p in report.removed]
        lines += [f"{p.change:9} {'plugin':13} {p.name}" for p in report.plugins]
        lines += [f"note: {n}" for n in notes]
        verb = "would seal" if dry_run else "sealed"
        plugins = sum(p.change != "removed" for p in report.plugins)
        lines.append(f"{verb} {len(report.files)} file(s), {plugins} plugin fingerprint(s) in {report.seal_path}")
        if not dry_run:
            lines.append("next: `ductile system reload` applies the config to a running gateway")
        return "\n".join(lines)

    command.emit(data, text)
