"""Writing a backup archive: planned first (so the INCLUDED/EXCLUDED list can be shown before any
work), then snapshot, then tar.gz, all in a work directory next to the destination, which the
finished archive is hard-linked to: an existing destination is never overwritten, not even one
created while the backup ran, and a backup that fails leaves nothing under the destination name.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.config.model import GatewayConfig

from .manifest import MANIFEST_NAME, UID_NAME, Manifest, ManifestError
from .scope import WORK_PREFIX, Plan, plan_backup
from .snapshot import SnapshotError, planned, sqlite_file, take_snapshot


class BackupError(Exception):
    pass


@dataclass(frozen=True)
class Written:
    path: Path
    size: int
    seconds: float


def plan_for(config: GatewayConfig, destination: Path, scope: str) -> Plan:
    """The plan for writing `destination`; refuses an existing destination before any work."""
    if os.path.lexists(destination):
        raise BackupError(f"{destination} already exists: refusing to overwrite it (choose a new file name)")
    return plan_backup(config, scope, live_db=sqlite_file(), keep_out=[destination.parent])


def manifest_for(plan: Plan, database: dict[str, str]) -> Manifest:
    config = plan.config
    return Manifest(
        scope=plan.scope,
        database=database,
        source={
            "config_dir": str(config.config_dir),
            "state_path": str(config.state_path),
            "plugin_roots": [str(r) for r in config.plugin_roots],
            "env_files": [str(f) for f in config.env_files],
        },
        included=[{"path": database["archive_path"], "source": database["source"]}]
        + [{"path": i.member, "source": str(i.source)} for i in plan.items],
        excluded=[{"source": str(e.source), "reason": e.reason} for e in plan.excluded],
        plugin_roots=[{"archive_path": m.archive_path, "source_path": str(m.source_path)} for m in plan.plugin_roots],
        env_files=[{"archive_path": m.archive_path, "source_path": str(m.source_path)} for m in plan.env_files],
        config_files=plan.config_files,
        warnings=list(plan.warnings),
        backup_uid=plan.backup_uid,
    )


def preview_manifest(plan: Plan) -> Manifest:
    """The manifest a dry run shows: everything but the snapshot's hash."""
    return manifest_for(plan, planned())


def write_backup(plan: Plan, destination: Path) -> tuple[Manifest, Written]:
    started = time.monotonic()
    destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=destination.parent))
    try:
        try:
            snapshot = take_snapshot(work)
        except SnapshotError as exc:
            raise BackupError(str(exc)) from exc
        manifest = manifest_for(plan, snapshot.describe())
        partial = work / "archive.tar.gz"
        with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
            _add_bytes(tar, MANIFEST_NAME, manifest.text().encode())
            _add_bytes(tar, UID_NAME, f"{manifest.backup_uid}\n".encode())
            tar.add(snapshot.path, arcname=snapshot.member, recursive=False)
            for item in plan.items:
                try:
                    tar.add(item.source, arcname=item.member, recursive=False)
                except OSError as exc:
                    raise BackupError(f"cannot read {item.source}: {exc.strerror}") from exc
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(partial, 0o600)  # it may hold secrets: only its owner reads it
        _publish(partial, destination)
        return manifest, Written(destination, destination.stat().st_size, time.monotonic() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _publish(partial: Path, destination: Path) -> None:
    """Give the finished archive its name, unless that name was taken meanwhile."""
    try:
        os.link(partial, destination)
    except FileExistsError:
        raise BackupError(f"{destination} appeared while the backup ran: refusing to overwrite it") from None
    except OSError:
        # A file system without hard links: a rename, checked just before (a tiny race remains).
        if os.path.lexists(destination):
            raise BackupError(f"{destination} appeared while the backup ran: refusing to overwrite it") from None
        os.rename(partial, destination)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def read_manifest(archive: Path) -> Manifest:
    """The manifest of `archive`, read without extracting anything else."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            try:
                handle = tar.extractfile(MANIFEST_NAME)
            except KeyError:
                raise ManifestError(f"{archive} has no {MANIFEST_NAME}: not a ductile backup") from None
            if handle is None:
                raise ManifestError(f"{archive}: {MANIFEST_NAME} is not a regular file")
            return Manifest.parse(handle.read().decode("utf-8"))
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise ManifestError(f"cannot read {archive} as a tar.gz archive: {exc}") from exc
