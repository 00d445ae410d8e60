"""`system status`, `system scheduler`, `system breaker [PLUGIN]`, `system reset PLUGIN [--command C]`,
`system start`, `system reload`, `system doctor`, `system backup`, `system restore`, `system selfcheck`,
`system watch`, `system plugin-facts PLUGIN`, `system migrate-ledger --to URL`."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser
from django.db import DatabaseError
from django.utils import timezone

from gateway.cli.base import EXIT_CONFIG, EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit
from gateway.cli.facts import add_plugin_facts
from gateway.cli.nouns import NOUNS
from gateway.config.durations import format_duration
from gateway.config.errors import ConfigError
from gateway.config.model import GatewayConfig
from gateway.daemon.control import pid_file_for, running_pid
from gateway.http.refusals import API_AUTHENTICATION, WEBHOOK_DELIVERY, Kind, read_tally
from gateway.operations import CLI
from gateway.operations.backups.scope import DEFAULT_SCOPE, SCOPE_HOLDS, SCOPES
from gateway.operations.selfcheck import Check, discovery_check
from gateway.reports import breaker_report, parse_rfc3339, queue_status, schedule_entries
from gateway.reports.nodes import NodesReport, nodes_report
from gateway.runtime import RUNTIME
from gateway.storage.database import SchemaBehind, describe_database, pass_the_check_on
from ledger.models import CircuitBreaker, PluginInstanceRecord
from ledger.models.workers import PluginHealth

# `system start`'s default for --housekeeping-linger: the housekeeping cluster stops after this
# long without housekeeping to do (gateway.operations.housekeeping.work_for_cluster).
CLUSTER_LINGER = 30.0


class Command(DuctileCommand):
    help = NOUNS["system"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        status = actions.add_parser("status", help="config, database, plugins, queue, nodes and unserved plugins")
        self.add_json(status)
        breaker = actions.add_parser("breaker", help="circuit breakers: state and transition history")
        breaker.add_argument("plugin", nargs="?", help="one plugin's breaker (all breakers without it)")
        breaker.add_argument("--command", default="poll", help="with PLUGIN: the command's breaker (default poll)")
        breaker.add_argument("--limit", type=int, default=20, help="transition rows per breaker (default 20)")
        self.add_json(breaker)
        start = actions.add_parser("start", help="run the API, webhooks, workers and scheduler as one process tree")
        start.add_argument(
            "--role",
            action="append",
            default=[],
            metavar="ROLE",
            help="what this node runs, repeated or comma-separated: api (the API and webhook listeners), workers, "
            "scheduler, housekeeping (default: all four); the --no-… flags take one away",
        )
        start.add_argument(
            "--group", metavar="NAME", help="the workers run only this group of service.worker_groups (a worker node)"
        )
        start.add_argument("--no-workers", action="store_true", help="do not start runworkers (run them elsewhere)")
        start.add_argument(
            "--no-scheduler",
            action="store_true",
            help="do not run the scheduler (it runs on a thread of this process; run `runscheduler` elsewhere)",
        )
        start.add_argument(
            "--no-housekeeping", action="store_true", help="do not start the housekeeping cluster (qcluster)"
        )
        start.add_argument(
            "--housekeeping-linger",
            type=float,
            default=CLUSTER_LINGER,
            metavar="SECONDS",
            help="stop the housekeeping cluster after this long without housekeeping to do; it starts again "
            f"when some is due (default {CLUSTER_LINGER:.0f})",
        )
        scheduler = actions.add_parser("scheduler", help="every schedule entry: next run, status and reason")
        self.add_json(scheduler)
        reset = actions.add_parser("reset", help="close a plugin's circuit breakers (after fixing the cause)")
        reset.add_argument("plugin")
        reset.add_argument("--command", help="only this command's breaker (default: each of the plugin's, or poll)")
        reset.add_argument("--dry-run", action="store_true", help="show what would be reset")
        self.add_json(reset)
        backup = actions.add_parser("backup", help="a point-in-time tar.gz of the database, config and more")
        backup.add_argument("--to", required=True, metavar="FILE", help="the archive to write (never overwritten)")
        backup.add_argument(
            "--scope",
            choices=SCOPES,
            default=DEFAULT_SCOPE,
            help="what to take, each scope adding to the one before: "
            + "; ".join(f"{scope}: {SCOPE_HOLDS[scope]}" for scope in SCOPES)
            + f" (default {DEFAULT_SCOPE})",
        )
        backup.add_argument("--dry-run", action="store_true", help="list what would be included and excluded")
        self.add_json(backup)
        restore = actions.add_parser("restore", help="an archive back as an instance in a new directory")
        restore.add_argument("archive", metavar="FILE")
        restore.add_argument("--to", required=True, metavar="DIR", help="a directory that is absent or empty")
        restore.add_argument("--dry-run", action="store_true", help="show where everything would go")
        self.add_json(restore)
        add_plugin_facts(actions, self)
        selfcheck = actions.add_parser("selfcheck", help="read-only invariants: config, PID lock, database")
        self.add_json(selfcheck)
        reload = actions.add_parser(
            "reload", help="SIGHUP the running gateway (via its PID file): every process reloads"
        )
        reload.add_argument("--dry-run", action="store_true", help="validate and find the gateway; signal nothing")
        self.add_json(reload)
        doctor = actions.add_parser("doctor", help="what loads but cannot work as meant: plugins, aliases, routes, …")
        self.add_json(doctor)
        watch = actions.add_parser("watch", help="live view: queue, running, throughput, latency, breakers (q quits)")
        watch.add_argument("--once", action="store_true", help="print one snapshot and exit")
        watch.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
        watch.add_argument("--api-url", help="watch a gateway over its API (default with --api-key: api.listen)")
        watch.add_argument(
            "--api-key", help="bearer token (default: $DUCTILE_API_KEY, $DUCTILE_TOKEN, else the config's `*` token)"
        )
        self.add_json(watch)
        migrate = actions.add_parser(
            "migrate-ledger",
            help="copy this config's SQLite ledger into an empty PostgreSQL database (one box to a cluster)",
        )
        migrate.add_argument(
            "--to",
            required=True,
            metavar="URL",
            help="the PostgreSQL database: postgresql://USER:PASSWORD@HOST:PORT/NAME",
        )
        migrate.add_argument(
            "--replace", action="store_true", help="empty the target's ledger tables first (refused without it)"
        )
        migrate.add_argument("--dry-run", action="store_true", help="count what would be copied; change nothing")
        self.add_json(migrate)

    # What one action alone uses is imported in it: this module is loaded for every `system` call,
    # and `system status` is an agent's (the live view's rich, backups' tarfile, django-q2 and
    # croniter for housekeeping: ~30 ms of its start).
    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "start":
            self.start(options)
        elif options["action"] == "backup":
            from gateway.cli.backups import run_backup

            run_backup(self, options["to"], options["scope"], options["dry_run"])
        elif options["action"] == "restore":
            from gateway.cli.backups import run_restore

            run_restore(self, options["archive"], options["to"], options["dry_run"])
        elif options["action"] == "migrate-ledger":
            from gateway.cli.ledger_move import run_migrate_ledger

            run_migrate_ledger(self, options["to"], options["replace"], options["dry_run"])
        elif options["action"] == "plugin-facts":
            from gateway.cli.facts import run_plugin_facts

            run_plugin_facts(self, options["plugin"], options["fact_type"], options["limit"])
        elif options["action"] == "selfcheck":
            from gateway.cli.selfcheck import run_selfcheck

            run_selfcheck(self)
        elif options["action"] == "reload":
            self.reload(options["dry_run"])
        elif options["action"] == "doctor":
            self.doctor()
        elif options["action"] == "watch":
            self.watch(options)
        elif options["action"] == "breaker":
            self.breakers(options["plugin"], options["command"], options["limit"])
        elif options["action"] == "scheduler":
            self.scheduler()
        elif options["action"] == "reset":
            self.reset(options["plugin"], options["command"], options["dry_run"])
        else:
            self.status()

    def reload(self, dry_run: bool) -> None:
        """Validated here first: an invalid config would be refused by every process anyway (each
        keeps its running one), so the operator hears why now instead of in the daemon logs."""
        from gateway.daemon.control import NotRunning, gateway_pid, reload_gateway

        try:
            runtime = self.runtime()  # this command's own fresh load of the config on disk
        except ConfigError as exc:
            raise Exit(
                EXIT_CONFIG,
                f"the config is invalid, so the running gateway would keep its old one; not signalled:\n{exc}",
                {"problems": [p.as_dict() for p in exc.problems]},
            ) from exc
        try:
            pid = gateway_pid(runtime.config) if dry_run else reload_gateway(runtime.config)
        except NotRunning as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc
        data = {"pid": pid, "signalled": not dry_run, "dry_run": dry_run, "config_dir": str(runtime.config.config_dir)}
        verb = "would send" if dry_run else "sent"
        self.emit(data, f"{verb} SIGHUP to the gateway (pid {pid}): every process reloads {runtime.config.config_dir}")

    def watch(self, options: dict[str, Any]) -> None:
        """Over the API when a URL or a key is given (spec: `system watch --api-key TOKEN`), else
        from this machine's ledger. The view itself is gateway/cli/watch.py."""
        from rich.console import Console

        from gateway.cli.api_call import base_url, config_token, env_token
        from gateway.cli.watch import ApiSource, LocalSource, Watch, WatchError, json_lines, print_once

        if options["interval"] <= 0:
            raise Exit(EXIT_USAGE, "--interval must be a positive number of seconds")
        source: LocalSource | ApiSource
        if options["api_url"] or options["api_key"]:
            token = options["api_key"] or env_token(os.environ)
            served = self.gateway_runtime()
            source = ApiSource(options["api_url"] or base_url(served), token or config_token(served))
        else:
            source = LocalSource(self.open_ledger())
        console = Console()
        try:
            if self.as_json:
                json_lines(source, self.stdout, options["interval"], options["once"])
            elif options["once"]:
                print_once(source, console)
            elif not console.is_terminal:
                raise Exit(EXIT_USAGE, "the live view needs a terminal: use --once or --json")
            else:
                Watch(source, console, options["interval"]).run()
        except WatchError as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc

    def doctor(self) -> None:
        from gateway.operations.doctor import ERROR, diagnose

        runtime = self.runtime()
        try:
            self.open_ledger()
            nodes = nodes_report(timezone.now(), runtime.config.service.lease_ttl)
        except (SchemaBehind, DatabaseError) as exc:
            # The config's findings stand without the ledger; which plugins wait unserved is unknown.
            self.stderr.write(f"warning: the ledger could not be read, so unserved plugins are not checked: {exc}")
            nodes = None
        findings = diagnose(runtime, nodes)
        healthy = not any(f.severity == ERROR for f in findings)
        data = {"healthy": healthy, "findings": [f.as_dict() for f in findings]}

        def text() -> str:
            lines = [
                f"{f.severity.upper():7} [{f.check}] {f.message}" + (f"\n        at {f.where}" if f.where else "")
                for f in findings
            ]
            lines.append("healthy" if healthy else "problems found (exit 1)")
            return "\n".join(lines)

        self.emit(data, text)
        if not healthy:
            raise SystemExit(EXIT_FAILED)

    def breakers(self, plugin: str | None, command: str, limit: int) -> None:
        """Without PLUGIN every breaker (`{"breakers": [...]}`); with it, that plugin's breaker for
        `--command` in the original's shape, also before it has a row (state null)."""
        self.open_ledger()
        if plugin:
            breaker = CircuitBreaker.objects.filter(plugin=plugin, command=command).first()
            report = breaker_report(breaker, limit, plugin=plugin, command=command)
            self.emit(report, lambda: "\n".join(breaker_lines(report)))
            return
        data = {"breakers": [breaker_report(b, limit) for b in CircuitBreaker.objects.order_by("plugin", "command")]}

        def text() -> str:
            lines = [line for b in data["breakers"] for line in breaker_lines(b)]
            return "\n".join(lines) or "(no circuit breakers yet: no scheduled job has finished)"

        self.emit(data, text)

    def start(self, options: dict[str, Any]) -> None:
        from gateway.daemon.supervisor import CannotStart, Demand, Supervisor, parse_roles, plan
        from gateway.operations.housekeeping import refresh_schedules, work_for_cluster

        try:
            roles = parse_roles(options["role"])
        except ValueError as exc:
            raise Exit(EXIT_USAGE, f"--role: {exc}") from exc
        workers = "workers" in roles and not options["no_workers"]
        runtime = self.runtime()
        if options["group"] is not None:
            if not workers:
                raise Exit(EXIT_USAGE, "--group names the workers' group, but this node runs no workers")
            try:
                runtime.config.service.worker_group(options["group"])
            except ValueError as exc:
                raise Exit(EXIT_USAGE, f"--group: {exc}") from exc
        runtime = self.open_ledger(check_integrity=True)
        pass_the_check_on()  # its children need not read every page of the ledger again
        for warning in (*runtime.config.warnings, *runtime.registry.warnings):
            self.stderr.write(f"warning: {warning}")
        for problem in runtime.tokens.problems:
            self.stderr.write(f"warning: {problem}")
        housekeeping = None
        if "housekeeping" in roles and not options["no_housekeeping"]:
            housekeeping = Demand(work_for_cluster, linger=options["housekeeping_linger"])
        children = plan(
            runtime,
            runtime.config.config_dir,
            listen="api" in roles,
            workers=workers,
            group=options["group"],
            scheduler="scheduler" in roles and not options["no_scheduler"],
            housekeeping=housekeeping,
        )
        supervisor = Supervisor(
            children, RUNTIME, on_config=refresh_schedules if housekeeping else None, listen="api" in roles
        )
        try:
            raise SystemExit(supervisor.run())
        except CannotStart as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc

    def scheduler(self) -> None:
        entries = schedule_entries(self.open_ledger(), timezone.now())
        data = {"entries": entries}

        def text() -> str:
            lines = []
            for e in entries:
                lines.append(
                    f"{e['plugin']}:{e['schedule_id']:12} {e['status']:15} {e['command']:8} "
                    f"next {e['next_run_at'] or '-'}  {e['when'] or ''}"
                )
                if e["reason"]:
                    lines.append(f"    {e['reason']}")
                if e["last_fired_at"]:
                    lines.append(f"    last fired {e['last_fired_at']}, last success {e['last_success_at'] or '-'}")
            return "\n".join(lines) or "(no schedules configured)"

        self.emit(data, text)

    def reset(self, plugin: str, command: str | None, dry_run: bool) -> None:
        """Close a configured plugin's breakers: `--command`'s, else every one it has, else poll's
        (a breaker without a row is closed already: its reset changes nothing, as in the original)."""
        runtime = self.open_ledger()
        if plugin not in runtime.config.plugins:
            raise Exit(EXIT_FAILED, f"unknown plugin: {plugin} (not in the config's plugins)")
        rows = CircuitBreaker.objects.filter(plugin=plugin)
        commands = [command] if command else list(rows.order_by("command").values_list("command", flat=True))
        commands = commands or ["poll"]
        rows = rows.filter(command__in=commands)
        if dry_run:
            changed = list(rows.tripped().order_by("command").values_list("command", flat=True))
        else:
            changed = [b.command for b in rows.reset(by=str(CLI))]
        data = {"plugin": plugin, "reset": commands, "changed": changed, "dry_run": dry_run}
        verb = "Would reset" if dry_run else "Reset"
        self.emit(data, "\n".join(f"{verb} circuit breaker for {plugin} ({c})" for c in commands))

    def status(self) -> None:
        """The original's check list first (config_discovery, config_load, state_db, pid_lock),
        then what the gateway runs. Exit 78 when the config or the schema is the problem (as every
        command), 1 when the database cannot be read; the checks come with either."""
        checks = [discovery_check()]
        try:
            runtime = self.runtime()
        except ConfigError as exc:
            checks.append(Check("config_load", "fail", str(exc) or "the config did not load", _config_dir()))
            checks += [Check(name, "skipped", "skipped: the config did not load") for name in ("state_db", "pid_lock")]
            raise Exit(
                EXIT_CONFIG,
                f"configuration is invalid:\n{exc}",
                {
                    "status": "fail",
                    "healthy": False,
                    "checks": _dicts(checks),
                    "problems": [p.as_dict() for p in exc.problems],
                },
            ) from exc
        checks.append(Check("config_load", "ok", "configuration loaded", _config_dir()))
        try:
            self.open_ledger()
        except (SchemaBehind, DatabaseError) as exc:
            message = str(exc) if isinstance(exc, SchemaBehind) else f"database {describe_database()}: {exc}"
            checks.append(Check("state_db", "fail", message, describe_database()))
            checks.append(_gateway_lock(runtime.config))
            code = EXIT_CONFIG if isinstance(exc, SchemaBehind) else EXIT_FAILED
            raise Exit(code, message, {"status": "fail", "healthy": False, "checks": _dicts(checks)}) from exc
        checks.append(Check("state_db", "ok", "database open, schema current", describe_database()))
        checks.append(_gateway_lock(runtime.config))
        registry = runtime.registry
        now = timezone.now()
        queue = queue_status(now, lease_ttl=runtime.config.service.lease_ttl)
        cluster = nodes_report(now, runtime.config.service.lease_ttl)
        unhealthy = dict(
            PluginInstanceRecord.objects.filter(health=PluginHealth.UNHEALTHY).values_list("name", "last_error")
        )
        data = {
            "status": "ok" if not unhealthy and not registry.skipped else "degraded",
            # The original's verdict on its four checks; `status` adds plugins and breakers.
            "healthy": all(c.status == "ok" for c in checks),
            "checks": _dicts(checks),
            "config_dir": str(runtime.config.config_dir),
            "database": describe_database(),
            "service": runtime.config.service.name,
            "plugins_loaded": len(registry.instances),
            "plugins_disabled": sorted(registry.disabled),
            "plugins_skipped": dict(registry.skipped),
            "plugins_unhealthy": unhealthy,
            "plugins_circuit_open": CircuitBreaker.objects.tripped().count(),
            "daemon_running": bool(queue["workers"]),
            **queue,
            "nodes": cluster.nodes,
            "plugins_unserved": cluster.unserved,
            # This host's API processes' 401s and its webhook listeners' refusals of unproven
            # senders, each at most an interval old (gateway/http/refusals.py).
            "api_auth_failures": read_tally(API_AUTHENTICATION.tally_path(runtime.config.state_path)),
            "webhook_rejections": read_tally(WEBHOOK_DELIVERY.tally_path(runtime.config.state_path)),
        }

        def text() -> str:
            lines = [
                f"status: {data['status']}",
                *(f"  {c['name']}: {c['status'].upper()} - {c['detail']}" for c in data["checks"]),
                f"config: {data['config_dir']}",
                f"database: {data['database']}",
                f"plugins: {data['plugins_loaded']} loaded, {len(data['plugins_disabled'])} disabled, "
                f"{len(data['plugins_skipped'])} skipped",
            ]
            lines += [f"  skipped {n}: {r}" for n, r in data["plugins_skipped"].items()]
            lines += [f"  unhealthy {n}: {e}" for n, e in unhealthy.items()]
            lines.append("queue: " + ", ".join(f"{k} {v}" for k, v in data["queue"].items()))
            lines += node_lines(cluster, now)
            lines.append(refusals_line(API_AUTHENTICATION, data["api_auth_failures"]))
            lines.append(refusals_line(WEBHOOK_DELIVERY, data["webhook_rejections"]))
            return "\n".join(lines)

        self.emit(data, text)


def _config_dir() -> str | None:
    return str(RUNTIME.config_dir) if RUNTIME.config_dir else None


def _dicts(checks: list[Check]) -> list[dict[str, Any]]:
    return [c.as_dict() for c in checks]


def _gateway_lock(config: GatewayConfig) -> Check:
    """`pid_lock` as status reads it: a gateway holding the lock is the running state, not a
    failure (selfcheck, a pre-start gate, fails it instead)."""
    pid_file = pid_file_for(config)
    try:
        pid = running_pid(pid_file)
    except (ValueError, OSError) as exc:
        return Check("pid_lock", "fail", f"the PID file cannot be read: {exc}", str(pid_file))
    if pid is not None:
        return Check("pid_lock", "ok", f"held by the running gateway (pid {pid})", str(pid_file))
    return Check("pid_lock", "ok", "no gateway running (no live PID lock)", str(pid_file))


def node_lines(cluster: NodesReport, now: datetime) -> list[str]:
    """The nodes as a table, then each plugin no live node serves."""
    lines = [f"nodes: {len(cluster.live)} live, {len(cluster.nodes) - len(cluster.live)} lost"]
    header = ("HOST", "PID", "ROLES", "GROUP", "VERSION", "SLOTS", "LAST HEARTBEAT", "STATE")
    table = [header] + [
        (
            n["hostname"],
            str(n["pid"]),
            ",".join(n["roles"]),
            n["group"] or "*",
            n["version"] or "-",
            str(n["slots"]),
            format_duration(round(max(0.0, (now - parse_rfc3339(n["heartbeat_at"])).total_seconds()))) + " ago",
            n["liveness"],
        )
        for n in cluster.nodes
    ]
    if cluster.nodes:
        widths = [max(map(len, column)) for column in zip(*table, strict=True)]
        lines += [
            "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table
        ]
    lines += [
        f"  unserved: {u['plugin']}: {u['queued']} queued job{'s' if u['queued'] != 1 else ''} that no live node "
        f"runs (the oldest since "
        f"{u['oldest_queued_at']})"
        for u in cluster.unserved
    ]
    return lines


def refusals_line(kind: Kind, tally: dict[str, Any]) -> str:
    if tally.get("error"):
        return f"{kind.many}: unknown ({tally['error']})"
    if not tally["failures"]:
        return f"{kind.many}: none"
    newest = next(iter(tally["sources"].items()), None)
    last = f", last from {newest[0]} at {newest[1]['last_at']} ({newest[1]['last_reason']})" if newest else ""
    return f"{kind.many}: {tally['failures']:,} since {tally['since']}{last}"


def breaker_lines(report: dict[str, Any]) -> list[str]:
    """One breaker and its transitions, newest first, as the original prints them."""
    lines = [f"Circuit breaker for {report['plugin']} ({report['command']})"]
    if report["state"] is None:
        lines.append("State: no current row")
    else:
        lines.append(f"State: {report['state']} (failure_count={report['failure_count']})")
        lines += [f"{label}: {report[key]}" for label, key in BREAKER_FIELDS if report[key]]
    lines.append("Transitions:")
    lines += [
        f"- {t['created_at']} {t['from_state'] or '<none>'} -> {t['to_state']} reason={t['reason']}"
        f" failure_count={t['failure_count']}" + (f" job={t['job_id']}" if t["job_id"] else "")
        for t in report["transitions"]
    ] or ["- none"]
    return lines


BREAKER_FIELDS = (("Opened at", "opened_at"), ("Last failure", "last_failure_at"), ("Last job", "last_job_id"))
