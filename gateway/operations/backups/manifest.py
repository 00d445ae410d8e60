"""`BACKUP_MANIFEST.txt`: what an archive holds, where each part came from, and why anything was
left out. YAML, so an operator reads it with `tar -xzOf ARCHIVE BACKUP_MANIFEST.txt` and
`system restore` reads the same text back."""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml

from gateway.version import gateway_version, source_commit
from ledger.timestamps import rfc3339

MANIFEST_NAME = "BACKUP_MANIFEST.txt"
# The archive's own name, also in the manifest as `backup_uid` (as the original's): what pairs an
# archive with what is kept apart from it (a key, a label on the medium, an operator's note).
UID_NAME = "uid.txt"
FORMAT = "ductile-backup/1"
# Lower-case letters and digits a reader cannot confuse (no i, l, o, u: Crockford's base 32).
UID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
UID_LENGTH = 12


class ManifestError(Exception):
    pass


def new_backup_uid() -> str:
    """60 random bits: no two backups of one installation share one."""
    return "".join(secrets.choice(UID_ALPHABET) for _ in range(UID_LENGTH))


def gateway_commit() -> str:
    """The source commit (marked `-dirty` with uncommitted changes), or "unknown" for an
    installed package."""
    source = source_commit()
    if source is None:
        return "unknown"
    return source.commit + ("-dirty" if source.dirty else "")


@dataclass
class Manifest:
    scope: str
    database: dict[str, Any]  # engine, source, method, archive_path, sha256
    source: dict[str, Any]  # config_dir, state_path, plugin_roots, env_files
    included: list[dict[str, str]] = field(default_factory=list)
    excluded: list[dict[str, str]] = field(default_factory=list)
    plugin_roots: list[dict[str, str]] = field(default_factory=list)
    env_files: list[dict[str, str]] = field(default_factory=list)
    config_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    backup_uid: str = ""  # "" in an archive written before uids
    ductile_version: str = field(default_factory=gateway_version)
    ductile_commit: str = field(default_factory=gateway_commit)
    hostname: str = field(default_factory=socket.gethostname)
    created_at: str = field(default_factory=lambda: rfc3339(datetime.now(UTC), "seconds"))
    format: str = FORMAT

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "backup_uid": self.backup_uid,
            "ductile_version": self.ductile_version,
            "ductile_commit": self.ductile_commit,
            "hostname": self.hostname,
            "created_at": self.created_at,
            "scope": self.scope,
            "database": self.database,
            "source": self.source,
            "config_files": self.config_files,
            "plugin_roots": self.plugin_roots,
            "env_files": self.env_files,
            "warnings": self.warnings,
            "included": self.included,
            "excluded": self.excluded,
        }

    def text(self) -> str:
        header = (
            "# Ductile backup manifest: what this archive holds, where each part came from, and what\n"
            "# was left out and why. Restore with: ductile system restore ARCHIVE --to EMPTY_DIR\n"
        )
        return header + yaml.safe_dump(self.as_dict(), sort_keys=False, allow_unicode=True, width=4096)

    @classmethod
    def parse(cls, text: str) -> Manifest:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ManifestError(f"{MANIFEST_NAME} is not valid YAML: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            found = doc.get("format") if isinstance(doc, dict) else None
            raise ManifestError(f"{MANIFEST_NAME} is not a {FORMAT} manifest (format: {found!r})")
        try:
            return cls(**{key: doc[key] for key in cls.__dataclass_fields__ if key in doc})
        except TypeError as exc:
            raise ManifestError(f"{MANIFEST_NAME} is incomplete: {exc}") from exc
