"""`system restore ARCHIVE --to DIR`: an archive back as an instance that starts with
`--config-dir DIR/config` and finds the same jobs, facts and breakers.

Into a fresh directory only (absent or empty): the archive is unpacked into a staging directory
beside it, made runnable there, then renamed into place, so a restore that fails leaves nothing.

Where the database goes: the restored instance uses `DATABASE_URL` when it is set (as every
gateway process does), so a restore with `DATABASE_URL` set loads the archive into that database,
which must hold no ledger yet; otherwise the database is a SQLite file inside DIR, at the place the
restored config's `state.path` names (rewritten to point there when it pointed elsewhere). A SQLite
snapshot is copied as it is; a PostgreSQL export is loaded with `loaddata` after `migrate`.

The `.checksums` seal is keyed by absolute path, so it cannot survive a move: the restore checks
every sealed file against the archived seal and seals the ones that match again under their new
paths. A file that did not match is left out of the new seal, so the restored gateway reports it
exactly as the original would have.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection

from gateway.config.integrity import SealUnusable, digest, lock, read_seal, verify
from gateway.storage.database import describe_database
from ledger.models import Job

from .archive import read_manifest
from .manifest import MANIFEST_NAME, UID_NAME, Manifest
from .relocate import ConfigFile, Rewrite, apply_rewrites, plan_rewrites
from .scope import PID_FILE, RUNTIME_FILES, scope_rank
from .snapshot import EXPORT_MEMBER, EXPORTED_APPS, SQLITE_MEMBER

TOP_LEVEL = ("config", "plugins", "env", "db")


class RestoreError(Exception):
    pass


@dataclass
class RestoreReport:
    archive: Path
    target: Path
    scope: str
    created_at: str
    hostname: str
    backup_uid: str = ""
    database: str = ""
    config_dir: Path | None = None
    rewrites: list[Rewrite] = field(default_factory=list)
    seal: str | None = None
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "archive": str(self.archive),
            "target": str(self.target),
            "dry_run": self.dry_run,
            "scope": self.scope,
            "created_at": self.created_at,
            "hostname": self.hostname,
            "backup_uid": self.backup_uid,
            "database": self.database,
            "config_dir": str(self.config_dir) if self.config_dir else None,
            "rewrites": [{"file": str(r.file), "key": r.key, "old": r.old, "new": r.new} for r in self.rewrites],
            "seal": self.seal,
            "warnings": self.warnings,
        }


class Layout:
    """Where each part of the archive lands under the final target directory."""

    def __init__(self, manifest: Manifest, target: Path):
        self.target = target
        self.config_src = Path(manifest.source["config_dir"])
        self.has_config = scope_rank(manifest.scope) >= scope_rank("config")
        roots = [(Path(m["source_path"]), m["archive_path"]) for m in (*manifest.plugin_roots, *manifest.env_files)]
        if self.has_config:
            roots.append((self.config_src, "config"))
        # Longest source first: a plugin root inside the config directory maps as a plugin root.
        self.roots = sorted(roots, key=lambda r: len(r[0].parts), reverse=True)
        self.archived = {Path(i["source"]) for i in manifest.included if not i["path"].startswith("db/")}
        state = Path(manifest.source["state_path"])
        if self.has_config and self.config_src in state.parents:
            self.database = target / "config" / state.relative_to(self.config_src)
        else:
            self.database = target / "state" / state.name

    @property
    def config_dir(self) -> Path | None:
        return self.target / "config" if self.has_config else None

    def new_location(self, original: Path) -> Path | None:
        """Where the restored copy of `original` is, or None when the archive has none."""
        for source, member in self.roots:
            if original == source or source in original.parents:
                held = original in self.archived or any(original in path.parents for path in self.archived)
                return self.target / member / original.relative_to(source) if held else None
        return None

    def target_of(self, key: tuple[str | int, ...], original: Path) -> Path:
        if key == ("state", "path"):
            return self.database
        return self.new_location(original) or original


def restore_backup(archive: Path, target: Path, *, dry_run: bool) -> RestoreReport:
    if not archive.is_file():
        raise RestoreError(f"{archive} does not exist")
    manifest = read_manifest(archive)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RestoreError(f"{target} is not empty: restore writes into a new or empty directory only")
    layout = Layout(manifest, target)
    report = RestoreReport(
        archive,
        target,
        manifest.scope,
        manifest.created_at,
        manifest.hostname,
        backup_uid=manifest.backup_uid,
        config_dir=layout.config_dir,
    )
    report.dry_run = dry_run
    database_url = os.environ.get("DATABASE_URL") or None
    member = manifest.database["archive_path"]
    if database_url:
        _refuse_unless_empty()
        report.database = f"{describe_database()} (DATABASE_URL), loaded from the archive's {member}"
    else:
        how = "copied from" if member == SQLITE_MEMBER else "loaded from"
        report.database = f"sqlite:{layout.database} ({how} the archive's {member})"
    originals = _config_texts(archive, manifest)
    files = [ConfigFile(target / "config" / rel, layout.config_src / rel, text) for rel, text in originals.items()]
    report.rewrites = plan_rewrites(files, layout.target_of, target)
    report.warnings += _boundary_warnings(manifest, layout)
    if dry_run:
        return report
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.restore-", dir=target.parent))
    try:
        _extract(archive, staging)
        _place_database(staging, layout, member, database_url)
        for file in files:
            mine = [r for r in report.rewrites if r.file == file.final]
            if mine:
                (staging / file.final.relative_to(target)).write_text(apply_rewrites(file.text, mine), encoding="utf-8")
        os.rename(staging, target)  # an empty target directory is replaced whole
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if layout.config_dir is not None:
        report.seal, problems = _reseal(layout, originals)
        report.warnings += problems
    return report


def _refuse_unless_empty() -> None:
    tables = set(connection.introspection.table_names())
    if Job._meta.db_table in tables and Job.objects.exists():
        raise RestoreError(
            f"{describe_database()} (DATABASE_URL) already holds a ledger: restore loads into an empty "
            "database only; create one and point DATABASE_URL at it, or unset DATABASE_URL to restore "
            "into a SQLite file inside the target directory"
        )


def _config_texts(archive: Path, manifest: Manifest) -> dict[str, str]:
    """The archived YAML config files, as written (before any rewrite)."""
    texts = {}
    with tarfile.open(archive, "r:gz") as tar:
        for rel in manifest.config_files:
            try:
                handle = tar.extractfile(f"config/{rel}")
            except KeyError:
                continue
            if handle is not None:
                texts[rel] = handle.read().decode("utf-8")
    return texts


def _extract(archive: Path, staging: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            top = member.name.split("/", 1)[0]
            if member.name not in (MANIFEST_NAME, UID_NAME) and top not in TOP_LEVEL:
                raise RestoreError(f"{archive}: unexpected member {member.name!r}: not a ductile backup")
        try:
            # The data filter refuses absolute paths, `..`, links leaving the tree and devices.
            tar.extractall(staging, filter="data")
        except tarfile.FilterError as exc:
            raise RestoreError(f"{archive}: refused member: {exc}") from exc
    # An archive written before they were left out may carry a running gateway's files: the record
    # of its children would make the restored gateway's first start end the live one's processes.
    for name in (*RUNTIME_FILES, PID_FILE):
        for found in staging.rglob(name):
            if found.is_file():
                found.unlink()


def _place_database(staging: Path, layout: Layout, member: str, database_url: str | None) -> None:
    extracted = staging / member
    placed = staging / layout.database.relative_to(layout.target)
    if database_url is None:
        placed.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if member == SQLITE_MEMBER and database_url is None:
        os.replace(extracted, placed)
    elif member == SQLITE_MEMBER and database_url is not None:
        # Into PostgreSQL: the snapshot (brought up to this version's schema) exported as JSON lines.
        export = staging / "db" / "ledger.jsonl"
        snapshot_url = f"sqlite:///{extracted}"
        _manage(snapshot_url, "migrate", "--noinput")
        _manage(snapshot_url, "dumpdata", *EXPORTED_APPS, "--format", "jsonl", "--output", str(export))
        _load(export, database_url)
    elif member == EXPORT_MEMBER:
        _load(extracted, database_url or f"sqlite:///{placed}")
    else:
        raise RestoreError(f"unknown database member {member!r} in the manifest")
    shutil.rmtree(staging / "db", ignore_errors=True)


def _load(export: Path, database_url: str) -> None:
    _manage(database_url, "migrate", "--noinput")
    _manage(database_url, "loaddata", str(export))


def _manage(database_url: str, *args: str) -> None:
    """A Django management command against `database_url`, in its own process: the database this
    process was started on is not the one being restored into."""
    env = {**os.environ, "DATABASE_URL": database_url}
    command = [sys.executable, "-m", "gateway.cli.main", "django", *args]  # dumpdata is Django's own
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RestoreError(f"{' '.join(args[:1])} failed while restoring the database:\n" + "\n".join(tail))


def _boundary_warnings(manifest: Manifest, layout: Layout) -> list[str]:
    warnings = []
    if not layout.has_config:
        warnings.append(
            f"scope {manifest.scope}: the archive holds no config; point a config's state.path at {layout.database}"
        )
    if scope_rank(manifest.scope) < scope_rank("plugins") and manifest.source["plugin_roots"]:
        warnings.append(
            "plugin roots were not archived (scope below plugins): the restored config reads them where they were: "
            + ", ".join(manifest.source["plugin_roots"])
        )
    if scope_rank(manifest.scope) < scope_rank("all") and manifest.source["env_files"]:
        warnings.append(
            "environment files were not archived (scope below all): the restored config reads them where they were: "
            + ", ".join(manifest.source["env_files"])
        )
    return warnings


def _reseal(layout: Layout, originals: dict[str, str]) -> tuple[str | None, list[str]]:
    config_dir = layout.config_dir
    assert config_dir is not None
    try:
        seal = read_seal(config_dir)
    except SealUnusable as exc:
        return None, [f"not re-sealed: {exc}"]
    if seal is None:
        return None, []
    # Each sealed file, checked as it was backed up (a rewritten config file by its archived text)
    # against the archived seal, which is keyed by the original paths.
    digests: dict[Path, str | None] = {}
    moved: dict[Path, Path] = {}
    for key in seal.hashes:
        original = Path(key)
        new = layout.new_location(original)
        rel = str(original.relative_to(layout.config_src)) if layout.config_src in original.parents else None
        if rel in originals:
            digests[original] = digest(originals[rel].encode("utf-8"))
        else:
            readable = new if new is not None else original
            digests[original] = digest(readable.read_bytes()) if readable.is_file() else None
        moved[original] = new or original
    verdict = verify(config_dir, digests)
    refused = {p.file for p in (*verdict.refusals, *verdict.operational)}
    problems = [f"not re-sealed: {p}" for p in (*verdict.refusals, *verdict.operational)]
    keep = [moved[o] for o in digests if o not in refused and moved[o].is_file()]
    report = lock(config_dir, keep)
    count = len(report.files)
    return f"{count} file{'s' if count != 1 else ''} re-sealed under their new paths in {report.seal_path}", problems
