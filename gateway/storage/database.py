"""Opening the ledger: a fresh database is migrated on first start; one behind the code is
refused with the command that migrates it (spec "Plugin Facts" §8, "Migrations & schema"), and a
corrupted SQLite file is refused before anything runs on it."""

from __future__ import annotations

import errno
import fcntl
import importlib.util
import os
import pkgutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection
from django.db.migrations import Migration
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader


class SchemaBehind(Exception):
    exit_code = 78


class DatabaseCorrupt(Exception):
    """The SQLite ledger failed its integrity check at start-up: nothing may run on it."""


def describe_database() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:{db['NAME'] or '(none)'}"
    return f"postgresql://{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"


def ensure_schema() -> str:
    """Returns "migrated" for a fresh database, "current" otherwise; raises SchemaBehind."""
    if _every_migration_file_applied():
        return "current"
    if getattr(settings, "DUCTILE_LEDGER_APPS_ONLY", False):
        # A worker on its few apps (ductile_site/settings_worker.py) cannot load the migration
        # graph, whose ledger migrations depend on the others': it starts again on every app, and
        # that start migrates a fresh database or refuses one behind, as any command's does.
        from gateway.bootstrap import restart_with_every_app

        restart_with_every_app()
    if not _migration_plan():
        return "current"
    # Why the lock: processes started together on a fresh database (a daemon and a CLI call) race
    # to migrate it; without it the loser sees a half-migrated schema and calls it "behind".
    with _migration_lock():
        plan = pending_migrations()
        if not plan:
            return "current"  # another process migrated it while we waited
        if not MigrationExecutor(connection).loader.applied_migrations and not connection.introspection.table_names():
            call_command("migrate", interactive=False, verbosity=0)
            return "migrated"
    pending = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5]) + (" ..." if len(plan) > 5 else "")
    config_dir = os.environ.get("DUCTILE_CONFIG_DIR", "~/.config/ductile")
    raise SchemaBehind(
        f"database {describe_database()} is behind this version of the gateway ({len(plan)} migrations "
        f"pending: {pending}). Back it up, then run: ductile migrate --config-dir {config_dir}"
    )


# The start-up check. Why `quick_check(1)`: it reads every page and checks the b-trees, which is
# what overwritten or torn pages break, without `integrity_check`'s index-against-table
# cross-check. On a 1 GB ledger: about 1 s with the file in the page cache (~10 s cold), against
# ~9 s warm for `integrity_check`; `(1)` stops at the first problem. The full check is `system
# selfcheck`'s.
START_CHECK = "quick_check(1)"


def integrity_finding(db: Any, pragma: str) -> str | None:
    """What SQLite's `PRAGMA <pragma>` (`integrity_check`, or `quick_check(N)`) finds wrong with
    the database `db` (Django's connection, or a sqlite3 one where Django is not set up), in the
    words `system selfcheck` reports; None when it says ok."""
    name = pragma.partition("(")[0]
    try:
        # Inside the try: on some damage, opening the connection (its first PRAGMA) already fails.
        cursor = db.cursor()
        try:
            cursor.execute(f"PRAGMA {pragma}")
            lines = [str(row[0]) for row in cursor.fetchall()]
        finally:
            cursor.close()
    except (DatabaseError, sqlite3.DatabaseError) as exc:
        return f"{name} could not read the database: {exc}"
    if lines == ["ok"]:
        return None
    shown = "; ".join(lines[:10]) + (f"; ... ({len(lines)} problems)" if len(lines) > 10 else "")
    return f"PRAGMA {name} reported: {shown}"


# Set by `system start` for the processes it starts, once its own start-up check has passed: the
# ledger file's identity and metadata at that moment (`file_stamp`). A process that finds the file
# exactly so skips the check. Why: the check reads every page (~3 s warm and ~30 s cold on a 2 GB
# ledger), and `system start` ran it four times over the same unchanged file: itself, runworkers,
# and the check child of each gunicorn master (the API's, the webhook listener's). Any change to the
# file since (a checkpoint, a restore, an edit) and every later restart of a child checks again.
CHECKED_ENV = "DUCTILE_LEDGER_CHECKED"


def file_stamp(path: str) -> str | None:
    """The SQLite file's device, inode, size, and modification and change times; None without one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def checked_by_the_starter(path: str) -> bool:
    """Whether the process that started this one checked `path` as it is now (CHECKED_ENV)."""
    stamp = os.environ.get(CHECKED_ENV)
    return stamp is not None and stamp == file_stamp(path)


def verify_integrity() -> None:
    """The start-up check of the daemons and `system start` (gunicorn's master has its own,
    `gateway.bootstrap.ledger_refusal`): a corrupted SQLite file is refused before anything runs
    on it (issue 12: runworkers ran 45 jobs on one). Raises DatabaseCorrupt with the finding. Not
    on PostgreSQL, whose server checks its own pages, nor on an in-memory database, nor on a file
    the starting `system start` checked as it is now (CHECKED_ENV)."""
    from gateway.storage.sqlite3.base import is_file_database  # not at import: the backend loads Django's

    name = str(connection.settings_dict["NAME"] or "")
    if connection.vendor != "sqlite" or not is_file_database(name) or checked_by_the_starter(name):
        return
    finding = integrity_finding(connection, START_CHECK)
    if finding is not None:
        raise DatabaseCorrupt(corrupted(describe_database(), finding))


def pass_the_check_on() -> None:
    """After `verify_integrity` passed in `system start`: the processes it starts from now on find
    the stamp of the file as checked (CHECKED_ENV) in their environment."""
    name = str(connection.settings_dict["NAME"] or "")
    stamp = file_stamp(name) if connection.vendor == "sqlite" else None
    if stamp is not None:
        os.environ[CHECKED_ENV] = stamp
    else:
        os.environ.pop(CHECKED_ENV, None)


def corrupted(where: str, finding: str) -> str:
    """Why a process refuses to start on a corrupted ledger, and what to do."""
    return (
        f"database {where} is corrupted: {finding}. The gateway refuses to start on it: run `ductile system "
        "selfcheck` for the full report, then restore the database from a backup (`ductile system restore`)"
    )


def pending_migrations() -> list[tuple[Migration, bool]]:
    return [] if _every_migration_file_applied() else _migration_plan()


def _migration_plan() -> list[tuple[Migration, bool]]:
    """The exact check: every migration module imported and the graph built."""
    executor = MigrationExecutor(connection)
    return executor.migration_plan(executor.loader.graph.leaf_nodes())


def _every_migration_file_applied() -> bool:
    """Whether every migration module on disk is recorded as applied: then no plan can hold one.

    Why: the exact check (`MigrationExecutor`) imports every migration module and builds the
    graph, ~40 ms of every command that opens the ledger. This reads the same names as its
    loader finds them (each app's migrations package, listed without importing its modules) and
    one table. Anything else (a name not recorded, a package it cannot list, no table yet) goes to
    the exact check, so it can only say what that check would say."""
    on_disk: set[tuple[str, str]] = set()
    for app in apps.get_app_configs():
        module_name, _ = MigrationLoader.migrations_module(app.label)
        if module_name is None:
            continue
        try:
            spec = importlib.util.find_spec(module_name)
        except ImportError:
            continue
        if spec is None:
            continue  # no migrations package: the loader skips the app as well
        if spec.submodule_search_locations is None:
            return False  # a module, not a package: let the loader say what it makes of it
        on_disk.update(
            (app.label, info.name)
            for info in pkgutil.iter_modules(spec.submodule_search_locations)
            if not info.ispkg and info.name[0] not in "_~"
        )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT app, name FROM django_migrations")
            applied = set(cursor.fetchall())
    except DatabaseError:
        return False  # no table yet: a fresh database
    return on_disk <= applied


# Any fixed 64-bit number: it only has to be the same in every gateway process.
_PG_MIGRATION_LOCK = 0x6475637469  # "ducti"


@contextmanager
def _migration_lock() -> Iterator[None]:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        fd = os.open(f"{db['NAME']}.migrate.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [_PG_MIGRATION_LOCK])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [_PG_MIGRATION_LOCK])


# sqlite3's primary result codes (the low byte of an extended code): SQLITE_FULL is "database or
# disk is full"; on a full disk a WAL write can fail as SQLITE_IOERR ("disk I/O error") instead.
_SQLITE_STORAGE = {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR}
_SQLITE_STORAGE_TEXT = ("database or disk is full", "disk i/o error")
_PG_DISK_FULL = "53100"  # PostgreSQL's disk_full SQLSTATE
_OS_STORAGE = {errno.ENOSPC, errno.EDQUOT}


def storage_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps: Django re-raises the driver's error from it) says the
    database's storage refuses writes: a full disk, a quota, a write error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.Error):
            code = getattr(current, "sqlite_errorcode", None)
            if code is not None and code & 0xFF in _SQLITE_STORAGE:
                return True
            if any(text in str(current).lower() for text in _SQLITE_STORAGE_TEXT):
                return True
        if getattr(current, "sqlstate", None) == _PG_DISK_FULL:
            return True
        if isinstance(current, OSError) and current.errno in _OS_STORAGE:
            return True
        current = current.__cause__ or current.__context__
    return False


def unavailable_reason(exc: BaseException) -> str:
    """Why the database could not do what was asked, in words for whoever asked (an API client,
    a log line): a full disk said as such, anything else by its class and first line."""
    first_line = (str(exc).strip().splitlines() or [""])[0][:200]
    if storage_full(exc):
        return f"its disk is full ({first_line})" if first_line else "its disk is full"
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
