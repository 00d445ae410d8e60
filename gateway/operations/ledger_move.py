"""`system migrate-ledger --to URL`: a one-box install's SQLite ledger copied into PostgreSQL, the
step from one box to a cluster (docs/deployment.md).

The command starts itself again with the target as its database (DATABASE_URL) and the SQLite file
as a second one (`ledger_source`, ductile_site/settings.py), so each value is read by the field
that wrote it and written by the same field for PostgreSQL: times to the microsecond, JSON as JSON,
ids as they were. Then, in one PostgreSQL transaction, on a schema made by the migrations:

- every table of the ledger app and of the console's login records (django-axes) is streamed
  with COPY, rows as they are;
- the console's accounts (with their roles and permissions) and the admin's record of actions
  (LogEntry) go through Django's serializers with natural keys: group, permission and content
  type ids are each database's own;
- every sequence is set past its table's largest id, and every table counted again on both sides.

The source is read in one SQLite transaction that holds its write lock, so nothing changes it
while it is copied. Not copied, as a backup of a PostgreSQL ledger leaves them out
(gateway/operations/backups/snapshot.py): django-q2's tables (housekeeping schedules are written
from the config at start; task results are transient) and the console's sessions (users log in
again).

Why not `dumpdata`/`loaddata` (what `system restore` uses into PostgreSQL): loaddata saves one
object at a time. A ledger of 50,000 jobs (330,000 rows) moved in 14 s, against 607 s for
dumpdata, migrate and loaddata (tests/bench/bench_ledger_move.py, 2 shared cores).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import serializers
from django.core.management.color import no_style
from django.db import DEFAULT_DB_ALIAS, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from gateway.storage.database import describe_database, ensure_schema
from ledger.models import WorkerInstance

SOURCE_ENV = "DUCTILE_LEDGER_SOURCE"
# Copied row for row: nothing in them refers to a row another database numbers differently.
COPIED_APPS = ("ledger", "axes")
# Copied by natural key: their rows refer to groups, permissions and content types, which the
# target's migrations made with ids of its own. Users before the records that name them.
BY_NATURAL_KEY = ("auth.User", "admin.LogEntry")
# Rows per fetch from SQLite while streaming.
CHUNK = 2000


class MoveRefused(Exception):
    """The move would lose or overwrite something; why, and what to do."""


@dataclass(frozen=True)
class TableCopy:
    table: str
    rows: int


@dataclass
class MoveReport:
    source: str
    target: str
    dry_run: bool
    replace: bool
    schema: str = ""
    tables: list[TableCopy] = field(default_factory=list)
    target_rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "dry_run": self.dry_run,
            "replace": self.replace,
            "schema": self.schema,
            "tables": [{"table": t.table, "rows": t.rows} for t in self.tables],
            "rows": self.rows,
            "target_rows_before": self.target_rows,
            "seconds": round(self.seconds, 3),
        }


def copied_models() -> list[type[models.Model]]:
    """Every table the move fills: COPIED_APPS' (their many-to-many tables too), then
    BY_NATURAL_KEY's with theirs."""
    found: list[type[models.Model]] = []
    for label in COPIED_APPS:
        found += [m for m in apps.get_app_config(label).get_models(include_auto_created=True) if _stored(m)]
    for model in _by_natural_key():
        found += [model, *_throughs(model)]
    return found


def _by_natural_key() -> list[type[models.Model]]:
    return [apps.get_model(label) for label in BY_NATURAL_KEY]


def _throughs(model: type[models.Model]) -> list[type[models.Model]]:
    """`model`'s many-to-many tables (a user's groups and permissions)."""
    return [f.remote_field.through for f in model._meta.local_many_to_many]  # type: ignore[union-attr, misc]


def _stored(model: type[models.Model]) -> bool:
    return model._meta.managed and not model._meta.proxy


def move(*, replace: bool, dry_run: bool, lease_ttl: float) -> MoveReport:
    """Copy the `ledger_source` database into the default one (the process's two databases)."""
    source, target = connections[settings.LEDGER_SOURCE], connections[DEFAULT_DB_ALIAS]
    report = MoveReport(source_description(), describe_database(), dry_run, replace)
    started = time.monotonic()
    _refuse_a_source_behind(source)
    _refuse_live_workers(lease_ttl)
    tables = copied_models()
    if dry_run:
        report.schema, report.target_rows = _target_as_it_is(target, tables)
        report.tables = [TableCopy(m._meta.db_table, m._base_manager.using(source.alias).count()) for m in tables]
        _refuse_an_occupied_target(report, replace, would=True)
        report.seconds = time.monotonic() - started
        return report
    report.schema = ensure_schema()  # a fresh target is migrated here; one behind is refused
    report.target_rows = _occupied(tables)
    _refuse_an_occupied_target(report, replace, would=False)
    # The source's write lock for the length of the copy: nothing changes it meanwhile.
    with transaction.atomic(using=source.alias), transaction.atomic(using=target.alias):
        if report.target_rows:
            _empty(target, tables)
        natural = _by_natural_key()
        # A user's groups and permissions are saved with the user (by their natural keys).
        saved_with_owner = {through for owner in natural for through in _throughs(owner)}
        for model in tables:
            if model in natural:
                _copy_by_natural_key(model, source, target)
            elif model not in saved_with_owner:
                _copy_rows(model, source, target)
        for statement in target.ops.sequence_reset_sql(no_style(), tables):
            with target.cursor() as cursor:
                cursor.execute(statement)
        report.tables = _counted_alike(tables, source, target)
    report.seconds = time.monotonic() - started
    return report


def source_description() -> str:
    return f"sqlite:{settings.DATABASES[settings.LEDGER_SOURCE]['NAME']}"


def _refuse_a_source_behind(source: BaseDatabaseWrapper) -> None:
    executor = MigrationExecutor(source)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        raise MoveRefused(
            f"the source ledger {source_description()} is behind this version of the gateway "
            f"({len(pending)} migrations pending): bring it up to date first, with `ductile migrate` "
            "(DATABASE_URL unset), then move it"
        )


def _refuse_live_workers(lease_ttl: float) -> None:
    """Nodes that heartbeat on the source (workers, a scheduler, an API) would go on changing it
    after the copy."""
    live = list(
        WorkerInstance.objects.using(settings.LEDGER_SOURCE)
        .heartbeating(timezone.now(), lease_ttl)
        .values_list("id", "roles")
    )
    if live:
        raise MoveRefused(
            f"{len(live)} node(s) are running on the source ledger {source_description()} "
            f"({', '.join(f'{node} ({roles})' for node, roles in live)}): stop every gateway process that uses it "
            "(systemctl stop ductile), then move it"
        )


def _target_as_it_is(target: BaseDatabaseWrapper, tables: list[type[models.Model]]) -> tuple[str, dict[str, int]]:
    """For a dry run: whether the target's schema would be made, and its tables that hold rows."""
    existing = set(target.introspection.table_names())
    if not existing:
        return "would be created (the target database is empty)", {}
    return "present", _occupied([m for m in tables if m._meta.db_table in existing])


def _occupied(tables: list[type[models.Model]]) -> dict[str, int]:
    counts = {m._meta.db_table: m._base_manager.using(DEFAULT_DB_ALIAS).count() for m in tables}
    return {table: rows for table, rows in counts.items() if rows}


def _refuse_an_occupied_target(report: MoveReport, replace: bool, *, would: bool) -> None:
    if report.target_rows and not replace:
        held = ", ".join(f"{table} ({rows})" for table, rows in report.target_rows.items())
        raise MoveRefused(
            f"the target {report.target} already holds rows: {held}. The move copies into an empty "
            "ledger only; --replace empties these tables first" + (" (this dry run changed nothing)" if would else "")
        )


def _empty(target: BaseDatabaseWrapper, tables: list[type[models.Model]]) -> None:
    names = [m._meta.db_table for m in tables]
    for statement in target.ops.sql_flush(no_style(), names, allow_cascade=True):
        with target.cursor() as cursor:
            cursor.execute(statement)


def _copy_rows(model: type[models.Model], source: BaseDatabaseWrapper, target: BaseDatabaseWrapper) -> None:
    """Every row of `model`'s table, streamed into PostgreSQL's COPY: each value as the field read
    it from SQLite, prepared by the same field for PostgreSQL (what an INSERT of it would send)."""
    fields = model._meta.concrete_fields
    quote = target.ops.quote_name
    columns = ", ".join(quote(str(f.column)) for f in fields)
    statement = f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN"
    with target.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        for row in _rows(model, source, [f.attname for f in fields]):
            copy.write_row([f.get_db_prep_save(value, target) for f, value in zip(fields, row, strict=True)])


def _rows(model: type[models.Model], source: BaseDatabaseWrapper, attnames: list[str]) -> Iterator[tuple[Any, ...]]:
    rows = model._base_manager.using(source.alias).order_by("pk").values_list(*attnames)
    return rows.iterator(chunk_size=CHUNK)


def _copy_by_natural_key(model: type[models.Model], source: BaseDatabaseWrapper, target: BaseDatabaseWrapper) -> None:
    rows = model._base_manager.using(source.alias).order_by("pk")
    data = serializers.serialize("python", rows, use_natural_foreign_keys=True)
    for found in serializers.deserialize("python", data, using=target.alias):
        found.save(using=target.alias)


def _counted_alike(
    tables: list[type[models.Model]], source: BaseDatabaseWrapper, target: BaseDatabaseWrapper
) -> list[TableCopy]:
    """Each table's rows on both sides, inside the copy's transactions: a difference rolls the
    target back (the error names the table) rather than leaving a ledger that differs."""
    copied = []
    for model in tables:
        here = model._base_manager.using(source.alias).count()
        there = model._base_manager.using(target.alias).count()
        if here != there:
            raise MoveRefused(
                f"{model._meta.db_table}: {here} rows in the source but {there} in the target after the copy; "
                "nothing was kept"
            )
        copied.append(TableCopy(model._meta.db_table, there))
    return copied
