"""What a backup takes at each scope, and what it leaves out and why.

The scopes are a nested ladder (spec "Deployment Guide" §10): `db` is the database snapshot;
`config` adds the config directory; `plugins` adds every plugin root; `all` adds the
`environment_vars.include` files. Every file walked is either included or excluded with a reason,
and both lists go into the manifest, so an operator can see exactly what a restore will bring back.
Pure file-system reading: nothing is written here.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gateway.config.loader import Origin
from gateway.config.model import GatewayConfig

from .manifest import new_backup_uid

SCOPES = ("db", "config", "plugins", "all")
DEFAULT_SCOPE = "config"
# What each scope holds, in the words `--help` and every INCLUDED list say it: `config` holds the
# database too (the spec's ladder, and its default), which its name alone does not tell.
SCOPE_HOLDS = {
    "db": "the database snapshot only",
    "config": "the database snapshot and the config directory",
    "plugins": "the database snapshot, the config directory and every plugin root",
    "all": "the database snapshot, the config directory, every plugin root and the environment files",
}
# Rebuilt on the target host, never worth carrying (spec §10's list).
JUNK_NAMES = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", ".DS_Store"})
JUNK_SUFFIXES = (".pyc", ".pyo")
PID_FILE = "ductile.pid"
# What a running gateway keeps beside its database, made again at its next start: the runtime
# snapshot its children read (gateway/runtime.py SNAPSHOT_FILE), the stream seats
# (gateway/http/streamseats.py), the API's 401 and the webhooks' rejection tallies
# (gateway/http/refusals.py), the record of the supervisor's children (gateway/daemon/tree.py:
# restored beside the live gateway, a start would end the live gateway's processes), and the
# directory of the synchronous-trigger slots' lock files (gateway/http/api/syncgate.py).
# tests/processes/test_backup.py checks the names against their owners'.
RUNTIME_FILES = (
    "ductile.runtime",
    "ductile.streams",
    "api-auth-failures.json",
    "webhook-rejections.json",
    "ductile.children",
)
SYNC_SLOTS = "sync-slots"
# Work directories of backups being written (or killed mid-write) start with this.
WORK_PREFIX = ".ductile-backup-"
# Files next to the live SQLite database that belong to it (WAL, shared memory, the locks).
DB_SIDECARS = ("-wal", "-shm", "-journal", ".migrate.lock", ".write-gate", ".checkpointer")
# Config files holding credentials: named in a warning when an archive carries them.
CREDENTIAL_FILES = ("tokens.yaml", "api.yaml", "webhooks.yaml")


@dataclass(frozen=True)
class Item:
    member: str  # path inside the archive
    source: Path


@dataclass(frozen=True)
class Excluded:
    source: Path
    reason: str


@dataclass(frozen=True)
class ArchivedPath:
    """A directory or file of the source host and where its copy sits in the archive."""

    archive_path: str
    source_path: Path


@dataclass
class Plan:
    scope: str
    config: GatewayConfig
    items: list[Item] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plugin_roots: list[ArchivedPath] = field(default_factory=list)
    env_files: list[ArchivedPath] = field(default_factory=list)
    # The YAML files the loader read, relative to the config directory (restore rewrites paths in them).
    config_files: list[str] = field(default_factory=list)
    # Chosen with the plan, so the list a backup shows first and the archive it writes agree.
    backup_uid: str = field(default_factory=new_backup_uid)


def scope_rank(scope: str) -> int:
    return SCOPES.index(scope)


def plan_backup(config: GatewayConfig, scope: str, *, live_db: Path | None, keep_out: Sequence[Path] = ()) -> Plan:
    """Everything the archive will hold besides the database snapshot. `live_db`: the SQLite file
    being snapshotted (never copied as a file); `keep_out`: directories holding archives (where
    this one is written), whose earlier archives must not go into the next."""
    plan = Plan(scope=scope, config=config)
    walker = _Walker(plan, config, live_db, keep_out)
    config_dir = config.config_dir
    if scope_rank(scope) >= scope_rank("config"):
        walker.walk(config_dir, "config")
        plan.config_files = [
            str(f.relative_to(config_dir))
            for f in config.files
            if f.suffix in (".yaml", ".yml") and _under(f, config_dir)
        ]
        for file in config.files:
            if not _under(file, config_dir):
                plan.excluded.append(Excluded(file, "config file outside the config directory: not archived"))
                plan.warnings.append(f"{file} is part of the config but outside {config_dir}: back it up separately")
        _credential_warnings(plan)
    else:
        plan.excluded.append(Excluded(config_dir, "config directory: archived at scope config and above"))
    for index, root in enumerate(config.plugin_roots):
        if scope_rank(scope) < scope_rank("plugins"):
            plan.excluded.append(Excluded(root, "plugin root: archived at scope plugins and above"))
        elif not root.is_dir():
            plan.excluded.append(Excluded(root, "plugin root does not exist"))
        else:
            mapping = ArchivedPath(f"plugins/{index:02d}-{root.name}", root)
            plan.plugin_roots.append(mapping)
            walker.walk(root, mapping.archive_path)
    _env_files(plan, config, walker)
    plan.items.sort(key=lambda i: i.member)
    return plan


def _env_files(plan: Plan, config: GatewayConfig, walker: _Walker) -> None:
    if not config.env_files:
        return
    if scope_rank(plan.scope) < scope_rank("all"):
        # Those inside the config directory were excluded (with the same reason) by the walk.
        for file in config.env_files:
            if not _under(file, config.config_dir):
                plan.excluded.append(Excluded(file, walker.ENV_REASON))
        return
    for index, file in enumerate(config.env_files):
        if _under(file, config.config_dir):
            member = f"config/{file.relative_to(config.config_dir)}"
        else:
            member = f"env/{index:02d}-{file.name}"
            plan.items.append(Item(member, file))
        plan.env_files.append(ArchivedPath(member, file))
    names = ", ".join(str(f) for f in config.env_files)
    plan.warnings.append(f"the archive holds environment files, secrets in plain text ({names}): store it encrypted")


def _credential_warnings(plan: Plan) -> None:
    for item in plan.items:
        if item.member.startswith("config/") and (
            item.source.name in CREDENTIAL_FILES
            or (item.source.parent.name == "scopes" and item.source.suffix == ".json")
        ):
            plan.warnings.append(
                f"{item.member} holds API credentials (token hashes, secret references or scope grants): "
                "protect the archive as you protect the config"
            )
    for key, origin in _literal_tokens(plan.config):
        plan.warnings.append(
            f"{key} ({origin.file}:{origin.line}) is a literal token, not a ${{VAR}} reference: "
            "the archive holds it in plain text"
        )


def _literal_tokens(config: GatewayConfig) -> list[tuple[str, Origin]]:
    """Each `api.auth.tokens[i].token` written in an archived YAML file as the secret itself, read
    as written: the loaded config holds every token after `${VAR}` interpolation, so it cannot
    tell `${DUCTILE_DEMO_TOKEN}` (only a name in the archive) from the token. A file that cannot
    be read again counts as literal: the warning is the safe side."""
    merged = config.merged
    if merged is None:
        return []
    found = []
    written: dict[Path, Any] = {}
    index = 0
    while (origin := merged.origins.get(("api", "auth", "tokens", index, "token"))) is not None:
        key, index = f"api.auth.tokens[{index}].token", index + 1
        if origin.path is None or not _under(origin.file, config.config_dir):
            continue  # outside the config directory: not archived (a warning of its own says so)
        if origin.file not in written:
            try:
                written[origin.file] = yaml.safe_load(origin.file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                written[origin.file] = None
        value: Any = written[origin.file]
        try:
            for part in origin.path:
                value = value[part]
        except (KeyError, IndexError, TypeError):
            value = None
        if not (isinstance(value, str) and "${" in value):
            found.append((key, origin))
    return found


class _Walker:
    ENV_REASON = "environment file (secrets): archived at scope all"

    def __init__(self, plan: Plan, config: GatewayConfig, live_db: Path | None, keep_out: Sequence[Path]):
        self.plan = plan
        self.scope_all = scope_rank(plan.scope) >= scope_rank("all")
        self.env_files = set(config.env_files)
        self.plugin_roots = set(config.plugin_roots)
        self.keep_out = {Path(p) for p in keep_out}
        self.database: dict[Path, str] = {}
        for db in {config.state_path, *([live_db] if live_db else [])}:
            self.database[db] = "the live database: archived as a consistent snapshot under db/"
            for suffix in DB_SIDECARS:
                self.database[Path(f"{db}{suffix}")] = "belongs to the live database (the snapshot under db/ has it)"
        state = config.state_path.parent
        self.database[state / PID_FILE] = "runtime PID file of a running gateway"
        for name in RUNTIME_FILES:
            self.database[state / name] = "runtime state of a running gateway: made again at its start"
        self.sync_slots = state / SYNC_SLOTS
        backup = config.service.backup
        self.backup_dir = backup.directory if backup else None

    def walk(self, top: Path, prefix: str) -> None:
        for directory, dirnames, filenames in os.walk(top):
            here = Path(directory)
            for name in sorted(dirnames):
                path = here / name
                reason = self._directory_reason(path, top)
                if reason:
                    dirnames.remove(name)
                    self.plan.excluded.append(Excluded(path, reason))
            dirnames.sort()
            for name in sorted(filenames):
                path = here / name
                reason = self._file_reason(path)
                if reason:
                    self.plan.excluded.append(Excluded(path, reason))
                else:
                    self.plan.items.append(Item(f"{prefix}/{path.relative_to(top).as_posix()}", path))

    def _directory_reason(self, path: Path, top: Path) -> str | None:
        if path.name in JUNK_NAMES:
            return "VCS or build artefacts: rebuilt on the target host"
        if path in self.keep_out or (self.backup_dir is not None and path == self.backup_dir):
            return "holds backup archives: earlier backups are not archived again"
        if path.name.startswith(WORK_PREFIX):
            return "work directory of a backup being written"
        if path.is_symlink():
            return "symlink: not followed"
        if path == self.sync_slots:
            return "lock files of the API's synchronous-trigger slots: runtime state, made again at start"
        if path in self.plugin_roots and path != top:
            return (
                "plugin root: archived on its own under plugins/"
                if scope_rank(self.plan.scope) >= scope_rank("plugins")
                else "plugin root: archived at scope plugins and above"
            )
        return None

    def _file_reason(self, path: Path) -> str | None:
        if path.name in JUNK_NAMES or path.name.endswith(JUNK_SUFFIXES):
            return "VCS or build artefacts: rebuilt on the target host"
        if path in self.database:
            return self.database[path]
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            return "symlink: not followed"
        if not stat.S_ISREG(mode):
            return "not a regular file"
        if path in self.env_files and not self.scope_all:
            return self.ENV_REASON
        return None


def _under(path: Path, top: Path) -> bool:
    return path == top or top in path.parents
