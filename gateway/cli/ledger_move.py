"""`system migrate-ledger --to URL` as the CLI runs it: what needs no database is checked here (the
URL, the source file, a running gateway's PID file), then the command starts itself again on both
databases (gateway.bootstrap.restart) and gateway/operations/ledger_move.py copies."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

from gateway.bootstrap import restart
from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit
from gateway.config.model import GatewayConfig
from gateway.daemon.control import pid_file_for, running_pid
from gateway.operations.backups.snapshot import sqlite_file
from gateway.operations.ledger_move import SOURCE_ENV, MoveRefused, MoveReport, move


def run_migrate_ledger(command: DuctileCommand, to: str, replace: bool, dry_run: bool) -> None:
    runtime = command.runtime()
    if not os.environ.get(SOURCE_ENV):
        target = _postgresql(to)
        source = _source(runtime.config.state_path)
        _refuse_a_running_gateway(runtime.config, source)
        restart({"DATABASE_URL": target, SOURCE_ENV: str(source)})
    try:
        report = move(replace=replace, dry_run=dry_run, lease_ttl=runtime.config.service.lease_ttl)
    except MoveRefused as exc:
        raise Exit(EXIT_FAILED, str(exc)) from exc
    command.emit(report.as_dict(), lambda: report_text(report))


def _postgresql(url: str) -> str:
    try:
        engine = dj_database_url.parse(url)["ENGINE"]
    except ValueError as exc:
        raise Exit(EXIT_USAGE, f"--to: {exc}") from exc
    if not engine.endswith("postgresql"):
        # The URL is not repeated: it may hold a password.
        scheme = url.partition(":")[0]
        raise Exit(
            EXIT_USAGE, f"--to must be a PostgreSQL URL (postgresql://USER:PASSWORD@HOST:PORT/NAME), not {scheme}:"
        )
    return url


def _source(state_path: Path) -> Path:
    """The SQLite ledger this config's gateway runs on: DATABASE_URL's file when it names one,
    else `state.path` (a DATABASE_URL that already names the new PostgreSQL database is fine)."""
    source = sqlite_file() or state_path
    if not source.is_file():
        raise Exit(EXIT_FAILED, f"no SQLite ledger at {source} (the config's state.path): nothing to move")
    return source


def _refuse_a_running_gateway(config: GatewayConfig, source: Path) -> None:
    pid_file = pid_file_for(config)
    try:
        pid = running_pid(pid_file)
    except ValueError as exc:
        raise Exit(EXIT_FAILED, f"cannot tell whether a gateway runs on {source}: {exc}") from exc
    if pid is not None:
        raise Exit(
            EXIT_FAILED,
            f"a gateway is running on {source} (pid {pid}, {pid_file}): what it writes after the copy would "
            "be left behind. Stop it first (systemctl stop ductile), then move the ledger",
        )


def report_text(report: MoveReport) -> str:
    verb = "would copy" if report.dry_run else "copied"
    lines = [f"{verb} {report.source} -> {report.target} (schema: {report.schema})"]
    if report.target_rows:
        emptied = "would empty" if report.dry_run else "emptied first (--replace)"
        lines.append(f"  {emptied}: " + ", ".join(f"{t} ({n})" for t, n in report.target_rows.items()))
    lines += [f"  {t.table:32} {t.rows:>10,}" for t in report.tables if t.rows]
    empty = [t.table for t in report.tables if not t.rows]
    if empty:
        lines.append("  empty: " + ", ".join(empty))
    lines.append(f"{report.rows:,} rows in {report.seconds:.1f}s")
    if not report.dry_run:
        lines.append(
            f"next: set DATABASE_URL to {report.target} for every gateway process (docs/deployment.md); "
            f"the SQLite file {report.source.removeprefix('sqlite:')} is left as it was"
        )
    return "\n".join(lines)
