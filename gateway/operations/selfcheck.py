"""`system selfcheck`: six read-only invariants (Operator Handbook "Selfcheck"), a deploy gate run
with the gateway stopped: exit 0 healthy, 1 when a check failed.

1. `config_discovery`: the config directory resolves and holds `config.yaml`;
2. `config_load`: the config loads (every problem named by file, line and key);
3. `pid_lock`: no live gateway holds the PID file next to the state database; while one does,
   checks 4-6 are skipped (reading a database a gateway is writing proves little, and the running
   gateway already proved its schema by starting);
4. `db_integrity`: SQLite's `PRAGMA integrity_check`; not applicable on PostgreSQL, whose server
   checks its own pages (pg_amcheck does a deep check);
5. `db_schema`: every migration applied, and every table, column and index of the ledger's and
   django-q2's models present;
6. `queue_terminal_freshness`: no terminal `job_queue` row older than `job_queue_retention`
   plus one housekeeping interval (rows wait up to that long for the hourly prune).

Nothing here writes: a missing SQLite file is reported, never created.

`GET /system/selfcheck` asks the same of a serving API process (`serving=True`), as the original's
does: `config_load` loads the files on disk afresh (what a reload or a restart would get, not what
this process runs on), the PID lock held by the gateway this process belongs to is the healthy
state, not a failure, and checks 4-6 are skipped while that gateway runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.apps import apps
from django.db import DatabaseError, connection
from django.utils import timezone

from gateway.config.durations import format_duration
from gateway.config.errors import ConfigError
from gateway.config.loader import ROOT_FILE
from gateway.daemon.control import pid_file_for, running_pid
from gateway.operations.backups.snapshot import sqlite_file
from gateway.reports import ts
from gateway.runtime import RUNTIME, build_runtime
from gateway.storage.database import describe_database, integrity_finding, pending_migrations
from ledger.models import Job
from ledger.timestamps import rfc3339

SKIPPED_RUNNING = "skipped: active gateway holds PID lock — quiesce before selfcheck"
SCHEMA_APPS = ("ledger", "django_q")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | fail | skipped
    detail: str
    path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.status == "ok",
            "status": self.status,
            "detail": self.detail,
            "path": self.path,
        }


def report(checks: list[Check]) -> dict[str, Any]:
    """What `system selfcheck --json` prints and `GET /system/selfcheck` answers, one shape for both
    so a deploy gate reads either: `ok` (false only when a check failed: skipped checks leave it
    true), `captured_at`, `checks`; `healthy` is `ok` under the name the CLI printed first."""
    ok = all(c.status != "fail" for c in checks)
    return {"ok": ok, "healthy": ok, "captured_at": ts(timezone.now()), "checks": [c.as_dict() for c in checks]}


def selfcheck(*, serving: bool = False) -> list[Check]:
    checks = [discovery_check()]
    config_dir = RUNTIME.config_dir
    if checks[0].status == "fail" or config_dir is None:
        return checks + _skipped(
            ("config_load", "pid_lock", "db_integrity", "db_schema", "queue_terminal_freshness"),
            "skipped: no config directory",
        )
    try:
        config = build_runtime(config_dir).config if serving else RUNTIME.get().config
    except ConfigError as exc:
        checks.append(Check("config_load", "fail", str(exc) or "the config did not load", str(config_dir)))
        return checks + _skipped(
            ("pid_lock", "db_integrity", "db_schema", "queue_terminal_freshness"), "skipped: the config did not load"
        )
    checks.append(Check("config_load", "ok", "configuration loaded", str(config_dir)))
    pid_check = _pid_lock(pid_file_for(config), serving)
    checks.append(pid_check)
    if pid_check.status == "fail" or serving:
        # Why skip on a serving API even without a PID file: this process is itself a gateway
        # writing the database, so the reason for the skip holds for it too.
        return checks + _skipped(("db_integrity", "db_schema", "queue_terminal_freshness"), SKIPPED_RUNNING)
    try:
        checks += _database_checks(config.service.job_queue_retention)
    finally:
        connection.close()
    return checks


def discovery_check() -> Check:
    """`config_discovery`: the config directory resolves and holds `config.yaml`."""
    config_dir = RUNTIME.config_dir
    if config_dir is None or not (config_dir / ROOT_FILE).is_file():
        where = f"{config_dir}" if config_dir else "(none)"
        return Check("config_discovery", "fail", f"no {ROOT_FILE} in {where}: set --config-dir or DUCTILE_CONFIG_DIR")
    return Check("config_discovery", "ok", "config directory resolved", str(config_dir))


def _skipped(names: tuple[str, ...], detail: str) -> list[Check]:
    return [Check(name, "skipped", detail) for name in names]


def _pid_lock(pid_file: Path, serving: bool) -> Check:
    path = str(pid_file)
    try:
        pid = running_pid(pid_file)
    except ValueError as exc:
        return Check("pid_lock", "fail", str(exc), path)
    except OSError as exc:
        return Check("pid_lock", "fail", f"cannot read the PID file: {exc.strerror}", path)
    if pid is not None:
        if serving and pid in _ancestors():
            return Check("pid_lock", "ok", f"held by this API's own gateway (pid {pid})", path)
        whose = "another gateway" if serving else "a gateway"
        return Check("pid_lock", "fail", f"{whose} is running (pid {pid}) and holds the PID lock", path)
    detail = "stale PID file: its process is gone" if pid_file.exists() else "no PID file: no gateway running"
    if serving:
        detail += " under `system start`; this API runs on its own"
    return Check("pid_lock", "ok", detail, path)


def _ancestors() -> set[int]:
    """This process's parent, its parent's, and so on (under `system start`: gunicorn's master,
    then the supervisor, whose PID the lock file holds)."""
    found: set[int] = set()
    pid = os.getppid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                line = stat.read()
        except OSError:
            break  # gone meanwhile, or no /proc: the chain ends here
        pid = int(line[line.rindex(b")") + 2 :].split()[1])
    return found


def _database_checks(queue_retention: float) -> list[Check]:
    where = describe_database()
    sqlite = sqlite_file()
    if sqlite is not None and not sqlite.is_file():
        missing = f"database file {sqlite} does not exist: start the gateway once before selfcheck"
        later = _skipped(("db_schema", "queue_terminal_freshness"), "skipped: no database")
        return [Check("db_integrity", "fail", missing, where), *later]
    checks = [_integrity(where, sqlite is not None), _schema(where)]
    if checks[-1].status == "ok":
        checks.append(_freshness(where, queue_retention))
    else:
        checks += _skipped(("queue_terminal_freshness",), "skipped: the schema is not current")
    return checks


def _integrity(where: str, sqlite: bool) -> Check:
    if not sqlite:
        return Check(
            "db_integrity",
            "skipped",
            "not applicable on PostgreSQL: PRAGMA integrity_check is SQLite's; the server checks its own "
            "pages (run pg_amcheck for a deep check)",
            where,
        )
    finding = integrity_finding(connection, "integrity_check")
    if finding is None:
        return Check("db_integrity", "ok", "PRAGMA integrity_check returned ok", where)
    return Check("db_integrity", "fail", finding, where)


def _schema(where: str) -> Check:
    try:
        pending = [f"{m.app_label}.{m.name}" for m, _ in pending_migrations()]
        missing = _missing_schema()
    except DatabaseError as exc:
        return Check("db_schema", "fail", f"cannot read the schema: {exc}", where)
    problems = []
    if pending:
        problems.append(
            f"{len(pending)} migrations not applied ({', '.join(pending)}): back up, then run `ductile migrate`"
        )
    if missing:
        problems.append("missing: " + ", ".join(missing))
    if problems:
        return Check("db_schema", "fail", "; ".join(problems), where)
    return Check("db_schema", "ok", "every migration applied; all required tables, columns and indexes present", where)


def _missing_schema() -> list[str]:
    """Tables, columns and indexes of our models that the database lacks."""
    missing = []
    introspection = connection.introspection
    with connection.cursor() as cursor:
        tables = set(introspection.table_names(cursor))
        for label in SCHEMA_APPS:
            for model in apps.get_app_config(label).get_models():
                table = model._meta.db_table
                if table not in tables:
                    missing.append(f"table {table}")
                    continue
                columns = {c.name for c in introspection.get_table_description(cursor, table)}
                missing += [
                    f"column {table}.{f.column}" for f in model._meta.concrete_fields if f.column not in columns
                ]
                present = set(introspection.get_constraints(cursor, table))
                wanted = [i.name for i in model._meta.indexes] + [c.name for c in model._meta.constraints]
                missing += [f"index {name} on {table}" for name in wanted if name not in present]
    return missing


def _freshness(where: str, retention: float) -> Check:
    # Here, not at import: housekeeping loads django-q2 (and croniter), which `system status`,
    # reading this module's Check, has no use for.
    from gateway.operations.housekeeping import PRUNE_EVERY_MINUTES

    grace = timedelta(seconds=retention, minutes=PRUNE_EVERY_MINUTES)
    stale = Job.objects.expired(timezone.now() - grace)
    count = stale.count()
    window = f"{format_duration(retention)} (job_queue_retention) plus the {PRUNE_EVERY_MINUTES}m housekeeping interval"
    if not count:
        return Check("queue_terminal_freshness", "ok", f"no terminal job_queue rows older than {window}", where)
    oldest = stale.order_by("completed_at").values_list("completed_at", flat=True).first()
    assert oldest is not None  # counted above, and `expired` rows are those finished before a time
    return Check(
        "queue_terminal_freshness",
        "fail",
        f"{count} terminal job_queue rows older than {window} (oldest finished {rfc3339(oldest, 'seconds')}): "
        "retention pruning has not run; is the housekeeping cluster running (system start)?",
        where,
    )
