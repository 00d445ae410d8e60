"""A consistent copy of the gateway's database, taken while the gateway keeps running.

SQLite: `VACUUM INTO` reads one snapshot of the database (committed WAL content included) and
writes it as a compact, self-contained file; in WAL mode readers never block writers, so workers
keep claiming and finishing jobs throughout.

PostgreSQL: there is no file to copy. Every ledger table is exported with Django's `dumpdata`
(JSON lines) inside one `REPEATABLE READ, READ ONLY` transaction, so all tables come from the same
instant; such a reader blocks no writer. The export is database-neutral: `system restore` loads
it into PostgreSQL or into a fresh SQLite file. django-q2's tables (housekeeping schedules,
rebuilt from the config at start, and task results) and Django's auth tables are not exported;
the manifest says so. `pg_dump` is not used: it must match the server's major version, and its
output restores into PostgreSQL only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction

from gateway.storage.database import describe_database

SQLITE_MEMBER = "db/ductile.sqlite"
EXPORT_MEMBER = "db/ledger.jsonl"
EXPORTED_APPS = ("ledger",)
NOT_EXPORTED = (
    "django_q (housekeeping schedules are rebuilt from the config at start; task results are transient)",
    "auth, admin, sessions, contenttypes (recreate admin accounts with createsuperuser)",
)


class SnapshotError(Exception):
    pass


@dataclass(frozen=True)
class Snapshot:
    path: Path
    member: str
    engine: str
    source: str
    method: str
    sha256: str

    def describe(self) -> dict[str, str]:
        return {
            "engine": self.engine,
            "source": self.source,
            "method": self.method,
            "archive_path": self.member,
            "sha256": self.sha256,
        }


def sqlite_file() -> Path | None:
    """The gateway's SQLite database file, or None on PostgreSQL."""
    db = settings.DATABASES["default"]
    return Path(str(db["NAME"])) if db["ENGINE"].endswith("sqlite3") else None


def planned() -> dict[str, str]:
    """What `take_snapshot` would record, for a dry run."""
    sqlite = sqlite_file() is not None
    return {
        "engine": "sqlite" if sqlite else "postgresql",
        "source": describe_database(),
        "method": "SQLite VACUUM INTO" if sqlite else "PostgreSQL export (dumpdata, REPEATABLE READ)",
        "archive_path": SQLITE_MEMBER if sqlite else EXPORT_MEMBER,
        "sha256": "(dry run: no snapshot taken)",
    }


def take_snapshot(workdir: Path) -> Snapshot:
    """Write the snapshot into `workdir` (an empty directory of ours)."""
    source = sqlite_file()
    if source is not None:
        if not source.is_file():
            raise SnapshotError(f"database file {source} does not exist (has the gateway ever started?)")
        out = workdir / "ductile.sqlite"
        with connection.cursor() as cursor:
            cursor.execute("VACUUM INTO %s", [str(out)])
        method = "SQLite VACUUM INTO: a consistent point-in-time copy, taken without stopping writers"
        member, engine = SQLITE_MEMBER, "sqlite"
    else:
        out = workdir / "ledger.jsonl"
        # The file is written inside the transaction on purpose: the transaction is the snapshot.
        # It is read-only and holds no lock a writer waits for.
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            call_command("dumpdata", *EXPORTED_APPS, format="jsonl", output=str(out), verbosity=0)
        method = (
            "PostgreSQL: the ledger tables exported with Django dumpdata (JSON lines) in one "
            "REPEATABLE READ, READ ONLY transaction; not exported: " + "; ".join(NOT_EXPORTED)
        )
        member, engine = EXPORT_MEMBER, "postgresql"
    return Snapshot(out, member, engine, describe_database(), method, sha256_file(out))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
