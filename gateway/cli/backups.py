"""`system backup` and `system restore` as the CLI shows them; the work is in
gateway/operations/backups/ (archive.py and restore.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.cli.base import EXIT_FAILED, DuctileCommand, Exit
from gateway.operations.backups.archive import BackupError, plan_for, preview_manifest, write_backup
from gateway.operations.backups.manifest import Manifest, ManifestError
from gateway.operations.backups.restore import RestoreError, restore_backup
from gateway.operations.backups.scope import SCOPE_HOLDS


def run_backup(command: DuctileCommand, destination: str, scope: str, dry_run: bool) -> None:
    config = command.runtime().config
    target = Path(destination).expanduser().absolute()
    try:
        plan = plan_for(config, target, scope)
        if dry_run:
            manifest = preview_manifest(plan)
            command.emit(
                {"destination": str(target), "dry_run": True, **manifest.as_dict()}, lambda: plan_text(manifest)
            )
            return
        if not command.as_json:
            # Spec §10: the list is shown before the work is done.
            command.stdout.write(plan_text(preview_manifest(plan)))
        manifest, written = write_backup(plan, target)
    except (BackupError, ManifestError) as exc:
        raise Exit(EXIT_FAILED, str(exc)) from exc
    data = {
        "destination": str(written.path),
        "dry_run": False,
        "size_bytes": written.size,
        "seconds": round(written.seconds, 3),
        **manifest.as_dict(),
    }
    command.emit(
        data,
        f"backup written: {written.path} ({written.size} bytes in {written.seconds:.1f}s); "
        f"backup uid {manifest.backup_uid}; database snapshot sha256 {manifest.database['sha256']}",
    )


def plan_text(manifest: Manifest) -> str:
    lines = [f"INCLUDED (scope {manifest.scope}: {SCOPE_HOLDS.get(manifest.scope, 'as listed')}):"]
    db = manifest.database
    lines.append(f"  + {db['archive_path']}  <- {db['source']}  ({db['method']})")
    roots = {m["archive_path"]: m["source_path"] for m in manifest.plugin_roots}
    counts: dict[str, int] = dict.fromkeys(roots, 0)
    for item in manifest.included[1:]:
        root = next((r for r in roots if item["path"].startswith(r + "/")), None)
        if root is not None:
            counts[root] += 1
        else:
            lines.append(f"  + {item['path']}  <- {item['source']}")
    lines += [f"  + {root}/  <- {source}  ({counts[root]} files)" for root, source in roots.items()]
    lines.append("EXCLUDED:")
    lines += [f"  - {e['source']}: {e['reason']}" for e in manifest.excluded] or ["  (nothing)"]
    if manifest.warnings:
        lines.append("WARNINGS:")
        lines += [f"  ! {w}" for w in manifest.warnings]
    return "\n".join(lines) + "\n"


def run_restore(command: DuctileCommand, archive: str, target: str, dry_run: bool) -> None:
    try:
        report = restore_backup(
            Path(archive).expanduser().absolute(), Path(target).expanduser().absolute(), dry_run=dry_run
        )
    except (RestoreError, ManifestError) as exc:
        raise Exit(EXIT_FAILED, str(exc)) from exc
    data: dict[str, Any] = report.as_dict()

    def text() -> str:
        verb = "would restore" if dry_run else "restored"
        taken = f"scope {report.scope}, taken {report.created_at} on {report.hostname}"
        taken += f", backup uid {report.backup_uid}" if report.backup_uid else ""
        lines = [f"{verb} {archive} ({taken}) into {report.target}"]
        lines.append(f"  database: {report.database}")
        lines += [f"  {r.file}: {r.key}: {r.old} -> {r.new}" for r in report.rewrites]
        if report.seal:
            lines.append(f"  seal: {report.seal}")
        lines += [f"  ! {w}" for w in report.warnings]
        if report.config_dir is not None and not dry_run:
            lines.append(f"start it with: ductile system start --config-dir {report.config_dir}")
        return "\n".join(lines)

    command.emit(data, text)
