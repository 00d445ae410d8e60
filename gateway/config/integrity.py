"""The seal: `.checksums`, BLAKE3 hashes of every authorized config file keyed by absolute path.

Spec 000 "Configuration Specification" §2 (tiered integrity preflight) and §2.1 (the seal); the
Operator Handbook's `config lock` ritual. Two tiers:

* high security (`tokens.yaml`, `webhooks.yaml`, `scopes/*.json`): a file missing from the seal or
  not matching it refuses the whole config (exit 78), always;
* operational (everything else the config reads: `config.yaml`, its includes, `.env` files): a
  warning, unless `service.strict_mode: true`, which makes it fatal too.

Hashes are of the bytes the loader parsed, taken before `${VAR}` interpolation, so what was
verified is exactly what runs. `.checksums` never lists itself, and moving the directory breaks
the seal (keys are absolute paths): only `config lock` writes it.

The seal also holds `plugin_fingerprints`: per configured plugin, the BLAKE3 of its manifest and
entrypoint bytes with their configured and symlink-resolved paths (the original's format; spec 000
testing guide, "Config integrity / plugin fingerprint tests"). This module reads and writes them;
`gateway.plugins.seal` computes and checks them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

import blake3
import yaml

from ledger.timestamps import rfc3339

from .atomic import write_atomic
from .errors import ConfigProblem

CHECKSUMS = ".checksums"
MANIFEST_VERSION = 2  # the original's current format: `hashes` keyed by absolute path
HIGH_SECURITY_NAMES = ("tokens.yaml", "webhooks.yaml")


class Tier(StrEnum):
    HIGH_SECURITY = "high_security"
    OPERATIONAL = "operational"


def tier_of(path: Path) -> Tier:
    if path.name in HIGH_SECURITY_NAMES or (path.parent.name == "scopes" and path.suffix == ".json"):
        return Tier.HIGH_SECURITY
    return Tier.OPERATIONAL


def digest(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def file_digest(path: Path) -> str | None:
    """The file's hash, or None when it cannot be read (a problem the caller reports)."""
    try:
        return digest(path.read_bytes())
    except OSError:
        return None


def scope_file_path(config_dir: Path, name: str) -> Path:
    """Where a token's `scopes_file` is: as written when absolute, else under the config root."""
    path = Path(name)
    return path if path.is_absolute() else config_dir / path


def scope_files(config_dir: Path) -> list[Path]:
    """`scopes/*.json` under the config root: high security whether or not a token names them."""
    folder = config_dir / "scopes"
    return sorted(p for p in folder.glob("*.json") if p.is_file()) if folder.is_dir() else []


@dataclass(frozen=True)
class PluginFingerprint:
    """The authorized identity of one configured plugin instance: its code's bytes. An alias
    (`uses:`) is recorded under its own name with its base plugin's files."""

    name: str
    enabled: bool
    uses: str
    manifest_path: str
    manifest_resolved_path: str
    manifest_hash: str
    entrypoint_path: str
    entrypoint_resolved_path: str
    entrypoint_hash: str

    def as_entry(self) -> dict[str, object]:
        entry: dict[str, object] = {"name": self.name, "enabled": self.enabled}
        if self.uses:
            entry["uses"] = self.uses
        for f in fields(self)[3:]:
            entry[f.name] = getattr(self, f.name)
        return entry

    @classmethod
    def from_entry(cls, entry: object) -> PluginFingerprint:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError("each plugin_fingerprints entry needs a name")
        values = {f.name: str(entry.get(f.name) or "") for f in fields(cls)}
        return cls(**{**values, "enabled": entry.get("enabled", True) is not False})  # type: ignore[arg-type]

    def same_code(self, other: PluginFingerprint) -> bool:
        return (self.manifest_hash, self.entrypoint_hash) == (other.manifest_hash, other.entrypoint_hash)


@dataclass(frozen=True)
class Seal:
    """A `.checksums` manifest as read. `plugins` is None when it has no `plugin_fingerprints`."""

    path: Path
    hashes: Mapping[str, str]
    generated_at: str | None = None
    plugins: Mapping[str, PluginFingerprint] | None = None


class SealUnusable(Exception):
    """`.checksums` exists but cannot be used: unreadable, not YAML, or another format. Never the
    same as missing: integrity was enabled and cannot be checked, so it is always fatal."""


def read_seal(config_dir: Path) -> Seal | None:
    """The config directory's seal, None when there is none (integrity was never enabled)."""
    path = config_dir / CHECKSUMS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SealUnusable(f"cannot read {path}: {exc}") from exc
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SealUnusable(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION or not isinstance(doc.get("hashes"), dict):
        raise SealUnusable(
            f"{path} is not a version {MANIFEST_VERSION} checksums manifest (expected keys version: 2 and hashes:); "
            "run `ductile config lock` to rewrite it"
        )
    hashes = {str(k): str(v) for k, v in doc["hashes"].items()}
    plugins = None
    if doc.get("plugin_fingerprints") is not None:
        try:
            entries = doc["plugin_fingerprints"]
            if not isinstance(entries, list):
                raise ValueError("plugin_fingerprints must be a list")
            plugins = {fp.name: fp for fp in map(PluginFingerprint.from_entry, entries)}
        except ValueError as exc:
            raise SealUnusable(f"{path}: {exc}; run `ductile config lock` to rewrite it") from exc
    return Seal(path, hashes, str(doc["generated_at"]) if doc.get("generated_at") else None, plugins)


@dataclass
class Verdict:
    """What the seal says about the files a config read: `refusals` stop the load whatever the
    mode; `operational` problems stop it in strict mode and are warnings otherwise."""

    refusals: list[ConfigProblem] = field(default_factory=list)
    operational: list[ConfigProblem] = field(default_factory=list)


def verify(config_dir: Path, digests: Mapping[Path, str | None]) -> Verdict:
    """Check the files a load read (`digests`: absolute path → hash of the bytes read, None when
    unreadable) against the seal."""
    verdict = Verdict()
    try:
        seal = read_seal(config_dir)
    except SealUnusable as exc:
        verdict.refusals.append(ConfigProblem(str(exc), file=config_dir / CHECKSUMS))
        return verdict
    hint = "run `ductile config lock` if the change was intended"
    if seal is None:
        high = [p for p in digests if tier_of(p) is Tier.HIGH_SECURITY]
        if high:
            names = ", ".join(str(p) for p in high)
            verdict.refusals.append(
                ConfigProblem(
                    f"no {CHECKSUMS} seal, but high-security files are present ({names}); review them and run "
                    "`ductile config lock`",
                    file=config_dir / CHECKSUMS,
                )
            )
        verdict.operational.append(
            ConfigProblem(
                f"no {CHECKSUMS} seal: config files are not integrity-checked; run `ductile config lock`",
                file=config_dir / CHECKSUMS,
            )
        )
        return verdict
    for path, actual in digests.items():
        expected = seal.hashes.get(str(path))
        if actual is None:
            problem = ConfigProblem("cannot be read to verify its checksum", file=path)
        elif expected is None:
            problem = ConfigProblem(f"not in {CHECKSUMS} (tampering, or a new file never locked); {hint}", file=path)
        elif expected.lower() != actual:
            problem = ConfigProblem(
                f"does not match {CHECKSUMS} (expected blake3 {expected[:16]}…, file is {actual[:16]}…): "
                f"modified since `config lock`; {hint}",
                file=path,
            )
        else:
            continue
        (verdict.refusals if tier_of(path) is Tier.HIGH_SECURITY else verdict.operational).append(problem)
    return verdict


@dataclass(frozen=True)
class SealedFile:
    path: Path
    tier: Tier
    hash: str
    change: str  # added | changed | unchanged


@dataclass(frozen=True)
class SealedPlugin:
    name: str
    change: str  # added | changed | unchanged | removed


@dataclass(frozen=True)
class LockReport:
    seal_path: Path
    files: tuple[SealedFile, ...]
    removed: tuple[str, ...]  # sealed before, no longer part of the config
    written: bool
    plugins: tuple[SealedPlugin, ...] = ()

    @property
    def changed(self) -> bool:
        return (
            bool(self.removed)
            or any(f.change != "unchanged" for f in self.files)
            or any(p.change != "unchanged" for p in self.plugins)
        )


def lock(
    config_dir: Path,
    files: Iterable[Path],
    *,
    plugins: Iterable[PluginFingerprint] | None = None,
    dry_run: bool = False,
) -> LockReport:
    """Seal `files` (the config's own, found by the loader): hash each and write `.checksums`
    atomically, replacing the previous seal entirely. `plugins`: the plugin fingerprints to
    record; None carries the previous seal's forward unchanged."""
    try:
        previous = read_seal(config_dir)
    except SealUnusable:
        previous = None  # being replaced: that is what lock is for
    old_plugins = dict(previous.plugins or {}) if previous else {}
    new_plugins = old_plugins if plugins is None else {fp.name: fp for fp in plugins}
    before = dict(previous.hashes) if previous else {}
    sealed = []
    for path in sorted(set(files)):
        if path.name == CHECKSUMS:
            continue
        value = digest(path.read_bytes())
        old = before.pop(str(path), None)
        change = "added" if old is None else ("unchanged" if old == value else "changed")
        sealed.append(SealedFile(path, tier_of(path), value, change))
    seal_path = config_dir / CHECKSUMS
    if not dry_run:
        _write_seal(seal_path, {str(f.path): f.hash for f in sealed}, new_plugins.values() if new_plugins else None)
    return LockReport(
        seal_path,
        tuple(sealed),
        tuple(sorted(before)),
        written=not dry_run,
        plugins=plugin_changes(old_plugins, new_plugins),
    )


def plugin_changes(
    old: Mapping[str, PluginFingerprint], new: Mapping[str, PluginFingerprint]
) -> tuple[SealedPlugin, ...]:
    changes = [
        SealedPlugin(name, "added" if name not in old else "unchanged" if old[name].same_code(fp) else "changed")
        for name, fp in new.items()
    ]
    changes += [SealedPlugin(name, "removed") for name in old if name not in new]
    return tuple(sorted(changes, key=lambda c: c.name))


def seal_plugins(config_dir: Path, fingerprints: Iterable[PluginFingerprint], *, dry_run: bool = False) -> LockReport:
    """`plugin lock`: record these plugins' fingerprints and change nothing else in the seal, so
    authorizing one plugin never blesses another plugin's or a config file's unreviewed change."""
    seal = read_seal(config_dir)
    if seal is None:
        raise SealUnusable(f"no {CHECKSUMS} in {config_dir}: run `ductile config lock` first")
    old = dict(seal.plugins or {})
    named = {fp.name: fp for fp in fingerprints}
    new = {**old, **named}
    if not dry_run:
        _write_seal(seal.path, seal.hashes, new.values())
    changes = tuple(c for c in plugin_changes(old, new) if c.name in named)
    return LockReport(seal.path, (), (), written=not dry_run, plugins=changes)


def reseal(config_dir: Path, files: Iterable[Path]) -> bool:
    """After an authorized change by the CLI (`config set`, `config token create`): update the
    seal's entries for exactly these files, so no other file's unreviewed change is blessed.
    False when the directory has no usable seal (then nothing is written)."""
    try:
        seal = read_seal(config_dir)
    except SealUnusable:
        return False
    if seal is None:
        return False
    hashes = dict(seal.hashes)
    for path in files:
        hashes[str(path)] = digest(path.read_bytes())
    _write_seal(seal.path, hashes, seal.plugins.values() if seal.plugins is not None else None)
    return True


def _write_seal(path: Path, hashes: Mapping[str, str], plugins: Iterable[PluginFingerprint] | None) -> None:
    body: dict[str, object] = {
        "version": MANIFEST_VERSION,
        "generated_at": rfc3339(datetime.now(UTC), "seconds"),
        "hashes": dict(hashes),
    }
    if plugins is not None:
        body["plugin_fingerprints"] = [fp.as_entry() for fp in sorted(plugins, key=lambda fp: fp.name)]
    # Mode 0600: the seal says which files matter and what they must be.
    write_atomic(path, yaml.safe_dump(body, sort_keys=False), mode=0o600)
