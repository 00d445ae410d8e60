"""Opening the ledger: a fresh database is migrated on first start; one behind the code is
refused with the command that migrates it (spec "Plugin Facts" §8, "Migrations & schema")."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


class SchemaBehind(Exception):
    exit_code = 78


def describe_database() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:{db['NAME']}"
    return f"postgresql://{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"


def ensure_schema() -> str:
    """Returns "migrated" for a fresh database, "current" otherwise; raises SchemaBehind."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        Path(str(db["NAME"])).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if not plan:
        return "current"
    if not executor.loader.applied_migrations and not connection.introspection.table_names():
        try:
            call_command("migrate", interactive=False, verbosity=0)
        except Exception:
            # Why: two processes starting on one fresh database race to migrate it; the loser
            # finds the winner's tables. Only a database still behind is an error.
            executor = MigrationExecutor(connection)
            if executor.migration_plan(executor.loader.graph.leaf_nodes()):
                raise
        return "migrated"
    pending = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5]) + (" ..." if len(plan) > 5 else "")
    config_dir = os.environ.get("DUCTILE_CONFIG_DIR", "~/.config/ductile")
    raise SchemaBehind(
        f"database {describe_database()} is behind this version of the gateway ({len(plan)} migrations "
        f"pending: {pending}). Back it up, then run: ductile migrate --config-dir {config_dir}"
    )
