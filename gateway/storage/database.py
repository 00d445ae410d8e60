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
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection

from gateway.bootstrap import restart_with_every_app

if TYPE_CHECKING:
    from django.db.migrations import Migration


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
        # A worker or a CLI read on the ledger's apps (ductile_site/settings_worker.py) cannot load
        # the migration graph, whose ledger migrations depend on the others': it starts again on
        # every app, and that start migrates a fresh database or refuses one behind, as any
        # command's does.
        restart_with_every_app()
    if not _migration_plan():
        return "current"
    # Why the lock: processes started together on a fresh database (a daemon and a CLI call) race
    # to migrate it; without it the loser sees a half-migrated schema and calls it "behind".
    with _migration_lock():
        plan = pending_migrations()
        if not plan:
            return "current"  # another process migrated it while we waited
        from django.db.migrations.executor import MigrationExecutor  # see _migration_plan

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


class _EarlyCheck:
    """START_CHECK of one SQLite file on a thread of its own, begun by `begin_integrity_check`.
    Read-only (`mode=ro`): it writes nothing, not even the checkpoint a last connection's close
    makes, and creates no file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.stamp = file_stamp(path)
        self.passed = False
        self._thread = threading.Thread(target=self._check, name="ductile-ledger-check", daemon=True)
        self._thread.start()

    def _check(self) -> None:
        try:
            with closing(sqlite3.connect(f"{Path(self.path).as_uri()}?mode=ro", uri=True)) as db:
                self.passed = db.execute(f"PRAGMA {START_CHECK}").fetchall() == [("ok",)]
        except (sqlite3.Error, ValueError):
            pass  # unreadable here (a relative path, a WAL file it may not open): checked again

    def vouches_for(self, path: str) -> bool:
        """Whether it passed on `path` as the file is now; waits for it to end."""
        self._thread.join()
        return self.passed and path == self.path and self.stamp is not None and self.stamp == file_stamp(path)


_early_checks: dict[str, _EarlyCheck] = {}


def begin_integrity_check() -> None:
    """Begin the start-up check of the SQLite file `prepare_process` chose (DUCTILE_DB_PATH) now,
    on a thread, for a process whose command runs `verify_integrity` later (gateway.cli.main:
    the daemons and `system start`). Why: SQLite reads and checks the pages without the GIL, on
    the other core, while this process goes on importing Django's ORM, models and command (~0.1
    s); run after them, the check added its whole time to the start (~3 ms on the throughput
    benchmark's ledger of 2,000 jobs, ~1 s on a 1 GB one). `verify_integrity` takes its answer
    only when it passed on the file as the file still is; any other (a finding, an error, a file
    changed since), and it checks again on Django's connection, whose finding it reports."""
    path = os.environ.get("DUCTILE_DB_PATH")
    if os.environ.get("DATABASE_URL") or not path or not os.path.isfile(path) or checked_by_the_starter(path):
        return
    _early_checks[path] = _EarlyCheck(path)


def verify_integrity() -> None:
    """The start-up check of the daemons and `system start` (gunicorn's master has its own,
    `gateway.http.start_check.ledger_refusal`): a corrupted SQLite file is refused before anything runs
    on it (issue 12: runworkers ran 45 jobs on one). Raises DatabaseCorrupt with the finding. Not
    on PostgreSQL, whose server checks its own pages, nor on an in-memory database, nor on a file
    the starting `system start` checked as it is now (CHECKED_ENV), nor on one this process's own
    check, begun early (`begin_integrity_check`), passed as it is now."""
    from gateway.storage.sqlite3.base import is_file_database  # not at import: the backend loads Django's

    name = str(connection.settings_dict["NAME"] or "")
    if connection.vendor != "sqlite" or not is_file_database(name) or checked_by_the_starter(name):
        return
    early = _early_checks.pop(name, None)
    if early is not None and early.vouches_for(name):
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
    """The exact check: every migration module imported and the graph built. Imported here, as
    django.db.migrations is (~2 ms of every start), only where a migration is found unapplied or
    the quick look cannot tell (`_every_migration_file_applied`)."""
    from django.db.migrations.executor import MigrationExecutor

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
        module_name = migrations_package(app.label, app.name)
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


def migrations_package(label: str, name: str) -> str | None:
    """The package Django's migration loader reads the app `label` (package `name`) from
    (`MigrationLoader.migrations_module`): its entry in settings.MIGRATION_MODULES (None: the app
    has no migrations), else the app's own `migrations`. The loader's rule, restated: importing
    the loader imports all of django.db.migrations, ~2 ms of every daemon's start and every CLI
    call's, where the schema is current (tests/ledger/test_migrations_in_step.py holds this to the
    loader's answer)."""
    if label in settings.MIGRATION_MODULES:
        module: str | None = settings.MIGRATION_MODULES[label]
        return module
    return f"{name}.migrations"


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


# Why a database refuses writes, told apart (issue 33: a read-only ledger was reported as a full
# disk). sqlite3's primary result codes are the low byte of an extended code. SQLite says "disk
# I/O error" (SQLITE_IOERR) both for a write into a file made read-only under an open connection
# (chattr +i, a file system remounted read-only) and, at times, for a full disk: the files and
# their file system are then looked at, which only ever happens on that error's path.
_SQLITE_FULL = {sqlite3.SQLITE_FULL}
_SQLITE_READ_ONLY = {sqlite3.SQLITE_READONLY}
_SQLITE_LOOK = {sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN}  # the files say which, if either
_SQLITE_FULL_TEXT = "database or disk is full"
_SQLITE_IOERR_TEXT = "disk i/o error"
_PG_DISK_FULL = "53100"  # disk_full
_PG_READ_ONLY = "25006"  # read_only_sql_transaction: a standby, or default_transaction_read_only
_OS_FULL = {errno.ENOSPC, errno.EDQUOT}
_OS_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
# Less free space than this under a SQLite file that failed a write with "disk I/O error": full.
_NEARLY_FULL_BYTES = 1 << 20

FULL = "its disk is full"
WRITE_FAILED = "a write to its disk failed"


def storage_refusal(exc: BaseException) -> str | None:
    """Why the database's storage refuses writes, in words, when `exc` (or what it wraps: Django
    re-raises the driver's error from it) says it does: FULL (a full disk, a quota), read-only
    (naming what cannot be written: a file's attributes or permissions, a read-only file system,
    a read-only server), or WRITE_FAILED; None for any other error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.Error):
            found = _sqlite_refusal(current)
            if found is not None:
                return found
        sqlstate = getattr(current, "sqlstate", None)
        if sqlstate == _PG_DISK_FULL:
            return FULL
        if sqlstate == _PG_READ_ONLY:
            return "it is read-only (the server accepts no writes: a standby, or default_transaction_read_only)"
        if isinstance(current, OSError) and current.errno in _OS_FULL:
            return FULL
        if isinstance(current, OSError) and current.errno in _OS_READ_ONLY:
            where = f"{current.filename} " if current.filename else ""
            return f"its files are read-only: {where}cannot be written ({os.strerror(current.errno)})"
        current = current.__cause__ or current.__context__
    return None


def _sqlite_refusal(error: sqlite3.Error) -> str | None:
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if code is not None else None
    text = str(error).lower()
    if primary in _SQLITE_FULL or _SQLITE_FULL_TEXT in text:
        return FULL
    if primary in _SQLITE_READ_ONLY:
        return _unwritable_ledger() or "its files are read-only"
    if primary in _SQLITE_LOOK or _SQLITE_IOERR_TEXT in text:
        unwritable = _unwritable_ledger()
        if unwritable is not None:
            return unwritable
        if primary == sqlite3.SQLITE_CANTOPEN:
            return None
        return FULL if _nearly_full() else WRITE_FAILED
    return None


def _ledger_path() -> str | None:
    db = settings.DATABASES["default"]
    name = str(db.get("NAME") or "")
    if not db["ENGINE"].endswith("sqlite3") or not name or name == ":memory:" or "mode=memory" in name:
        return None
    return name


def _unwritable_ledger() -> str | None:
    """What of the SQLite ledger cannot be written (its file, its WAL, its directory), in words."""
    database = _ledger_path()
    if database is None:
        return None
    directory = os.path.dirname(os.path.abspath(database))
    for path in (database, f"{database}-wal", directory):
        if os.path.exists(path) and not os.access(path, os.W_OK):
            try:
                read_only_mount = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
            except OSError:
                read_only_mount = False
            if read_only_mount:
                return f"its files are read-only: {path} is on a read-only file system"
            return f"its files are read-only: {path} cannot be written (its permissions or attributes: chattr +i?)"
    return None


def _nearly_full() -> bool:
    database = _ledger_path()
    if database is None:
        return True  # nothing to look at: a full disk, as SQLite's I/O errors most often are
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(database)))
    except OSError:
        return True
    free = st.f_bfree if os.geteuid() == 0 else st.f_bavail  # root may use the reserved blocks
    return free * st.f_frsize < _NEARLY_FULL_BYTES


def unavailable_reason(exc: BaseException) -> str:
    """Why the database could not do what was asked, in words for whoever asked (an API client,
    a log line, a command's error): a storage refusal said as such (`storage_refusal`), anything
    else by its class and first line."""
    first_line = (str(exc).strip().splitlines() or [""])[0][:200]
    refusal = storage_refusal(exc)
    if refusal is not None:
        return f"{refusal} ({first_line})" if first_line else refusal
    return f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__


def described(exc: BaseException) -> str:
    """A database error for a command's message: a storage refusal with its cause named, any
    other in the driver's own words."""
    return unavailable_reason(exc) if storage_refusal(exc) is not None else str(exc)
