"""Plugin fingerprints: the seal over plugin code (issue 12, defects 3 and 4).

`config lock` records, per configured plugin, the BLAKE3 of its manifest and entrypoint bytes in
`.checksums` (`plugin_fingerprints`); `plugin lock NAME` re-records one plugin and nothing else.
Spec 000's testing guide ("Config integrity / plugin fingerprint tests") sets the policy, checked
at every load (`verify_plugins`, from `build_runtime`):

* an enabled plugin whose manifest or entrypoint differs from its fingerprint, or that has none,
  or a seal with no `plugin_fingerprints` while plugins are configured, fails verification: fatal
  in strict mode ("plugin fingerprint check failed (strict mode)", Troubleshooting), a warning
  otherwise (like the operational tier of the config's own files);
* a disabled plugin's mismatch, and a fingerprint of a plugin no longer configured, only warn;
* a config with no seal at all is not integrity-checked (the loader says so already).

And again before every spawn (`PluginSeal.check`), since a plugin's files can change under a
running gateway: the resolved entrypoint must still be inside its plugin root (a symlink swapped
in after load is refused in every mode), and its bytes must still match (refused in strict mode,
run with a warning otherwise). The spawn path is hot: a file is hashed again only when its stat
changed (a cache keyed on device, inode, size, mtime and ctime), so a check costs a realpath and
two stats.

What this is not: a sandbox. A file changed between the check and the exec runs unchecked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.integrity import (
    CHECKSUMS,
    LockReport,
    PluginFingerprint,
    SealUnusable,
    digest,
    lock,
    read_seal,
    seal_plugins,
)
from gateway.config.loader import config_files, load_config_tree
from gateway.config.model import GatewayConfig

from .discovery import Discovery, discover_plugins
from .manifest import Manifest
from .registry import PluginInstance, Registry

STRICT_FAILURE = "plugin fingerprint check failed (strict mode)"

# path -> (stat key, hash). Entries for files changed within the last two seconds are not kept:
# a coarse timestamp could hide a second write in the same tick (git's "racy clean" problem).
_HASHES: dict[str, tuple[tuple[int, ...], str]] = {}
_RACY_NS = 2_000_000_000


def file_hash(path: str, st: os.stat_result | None = None) -> str:
    """BLAKE3 of the file at `path` (symlinks followed; `st` its stat if taken already), read again
    only when its stat changed."""
    st = st or os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    cached = _HASHES.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    with open(path, "rb") as fh:
        value = digest(fh.read())
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS:
        _HASHES[path] = (key, value)
    return value


def fingerprint_of(name: str, manifest: Manifest, *, enabled: bool = True) -> PluginFingerprint:
    """The fingerprint of `manifest`'s plugin as configured under `name`. The manifest's hash is
    of the bytes that were parsed; raises OSError when the entrypoint cannot be read."""
    entrypoint = os.path.realpath(manifest.declared_entrypoint)
    return PluginFingerprint(
        name=name,
        enabled=enabled,
        uses=manifest.name if manifest.name != name else "",
        manifest_path=str(manifest.file),
        manifest_resolved_path=os.path.realpath(manifest.file),
        manifest_hash=manifest.fingerprint,
        entrypoint_path=str(manifest.declared_entrypoint),
        entrypoint_resolved_path=entrypoint,
        entrypoint_hash=file_hash(entrypoint),
    )


def differences(sealed: PluginFingerprint, now: PluginFingerprint) -> list[str]:
    """What of `now` is not the code `sealed` records, one phrase per file."""
    return [
        f"{what} {path} (blake3 {current[:12]}, sealed {then[:12]})"
        for what, path, current, then in (
            ("manifest", now.manifest_resolved_path, now.manifest_hash, sealed.manifest_hash),
            ("entrypoint", now.entrypoint_resolved_path, now.entrypoint_hash, sealed.entrypoint_hash),
        )
        if current != then
    ]


# -- checking --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpawnCheck:
    path: Path  # what to execute: the entrypoint as it resolves now
    refusal: str | None = None
    warning: str | None = None


@dataclass(frozen=True)
class PluginSeal:
    """A runtime's view of its plugins' code: what it must be at every spawn."""

    strict: bool = False
    # Per instance, enabled or disabled: the code as it was when the runtime loaded.
    loaded: Mapping[str, PluginFingerprint] = field(default_factory=dict)
    # Per enabled instance: what its code must be at a spawn (its sealed fingerprint, else `loaded`).
    expected: Mapping[str, PluginFingerprint] = field(default_factory=dict)
    # Per enabled instance: its plugin root, resolved when loaded, and its entrypoint's (st_dev, st_ino).
    roots: Mapping[str, str] = field(default_factory=dict)
    inodes: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    problems: tuple[ConfigProblem, ...] = ()  # refuse the config in strict mode, else warnings
    warnings: tuple[ConfigProblem, ...] = ()

    def check(self, instance: PluginInstance) -> SpawnCheck:
        manifest = instance.manifest
        entrypoint = manifest.entrypoint  # what to run, unless it has to be resolved again
        path = str(entrypoint)
        try:
            st: os.stat_result | None = os.stat(path)
        except OSError:
            st = None
        # The very file that was inside the root at load (same device and inode) needs no realpath
        # (the costliest step, a stat per path component); anything else is resolved and judged.
        if st is None or (st.st_dev, st.st_ino) != self.inodes.get(instance.name):
            path, st = os.path.realpath(path), None
            entrypoint = Path(path)
            root = self.roots.get(instance.name) or os.path.realpath(manifest.root)
            if not path.startswith(root + os.sep):
                return SpawnCheck(
                    entrypoint,
                    refusal=f"plugin {instance.name!r}: its entrypoint {manifest.entrypoint} now resolves to {path}, "
                    f"outside plugin root {root} (it was inside when the plugin was loaded); not run",
                )
        expected = self.expected.get(instance.name)
        if expected is None:
            return SpawnCheck(entrypoint)
        try:
            manifest_hash, entrypoint_hash = file_hash(str(manifest.file)), file_hash(path, st)
        except OSError as exc:
            manifest_hash = entrypoint_hash = f"unreadable ({exc.strerror})"
        if (manifest_hash, entrypoint_hash) == (expected.manifest_hash, expected.entrypoint_hash):
            return SpawnCheck(entrypoint)
        now = replace(
            expected,
            manifest_resolved_path=str(manifest.file),
            manifest_hash=manifest_hash,
            entrypoint_resolved_path=path,
            entrypoint_hash=entrypoint_hash,
        )
        message = (
            f"{STRICT_FAILURE if self.strict else 'plugin fingerprint check failed'}: plugin {instance.name!r} "
            f"changed since it was sealed: {'; '.join(differences(expected, now))}. Review the change, then run "
            f"`ductile plugin lock {instance.name}`"
        )
        if self.strict:
            return SpawnCheck(entrypoint, refusal=message)
        return SpawnCheck(entrypoint, warning=message + " (run anyway: strict_mode is off)")


def verify_plugins(config: GatewayConfig, registry: Registry) -> PluginSeal:
    """Every configured plugin's code against the seal's `plugin_fingerprints` (module docstring)."""
    loaded: dict[str, PluginFingerprint] = {}
    problems: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []
    enabled = set(registry.instances)
    for name, instance in (*registry.instances.items(), *registry.disabled.items()):
        try:
            loaded[name] = fingerprint_of(name, instance.manifest, enabled=name in enabled)
        except OSError as exc:
            where = instance.manifest.declared_entrypoint
            problem = config.problem(("plugins", name), f"cannot fingerprint {where}: {exc.strerror}")
            (problems if name in enabled else warnings).append(problem)
    try:
        seal = read_seal(config.config_dir)
    except SealUnusable:
        seal = None  # refused by the loader already
    sealed = seal.plugins if seal is not None else None
    label = STRICT_FAILURE if config.service.admission.verify_integrity_on_boot else "plugin fingerprint check failed"
    if seal is not None and sealed is None and registry.instances:
        problems.append(
            ConfigProblem(
                f"{label}: {CHECKSUMS} has no plugin_fingerprints, so plugin code is not sealed; "
                "review the plugins, then run `ductile config lock`",
                file=seal.path,
            )
        )
    elif sealed is not None:
        for name, current in loaded.items():
            recorded = sealed.get(name)
            if recorded is None:
                message = f"plugin {name!r} is not in {CHECKSUMS} plugin_fingerprints"
            elif not recorded.same_code(current):
                message = f"plugin {name!r} changed since it was sealed: {'; '.join(differences(recorded, current))}"
            else:
                continue
            problem = config.problem(
                ("plugins", name), f"{label}: {message}; review it, then run `ductile plugin lock {name}`"
            )
            (problems if name in enabled else warnings).append(problem)
        for name in sealed:
            if name not in config.plugins:
                warnings.append(
                    ConfigProblem(
                        f"plugin {name!r} has a fingerprint in {CHECKSUMS} but is not configured; "
                        "`ductile config lock` drops it",
                        file=seal.path if seal else None,
                    )
                )
    expected = {name: (sealed or {}).get(name) or loaded[name] for name in enabled if name in loaded}
    roots = {name: os.path.realpath(inst.manifest.root) for name, inst in registry.instances.items()}
    inodes = {}
    for name, inst in registry.instances.items():
        try:
            st = os.stat(inst.manifest.entrypoint)
        except OSError:
            continue
        inodes[name] = (st.st_dev, st.st_ino)
    return PluginSeal(
        strict=config.service.admission.verify_integrity_on_boot,
        loaded=loaded,
        expected=expected,
        roots=roots,
        inodes=inodes,
        problems=tuple(problems),
        warnings=tuple(warnings),
    )


# -- locking ---------------------------------------------------------------------------------


def _discover(config_dir: Path) -> tuple[dict[str, Any], Discovery]:
    """The config's merged document and its plugins, found as the gateway finds them, without the
    typed checks: a config refused for its seal (or anything else) can still be locked."""
    data = load_config_tree(config_dir, os.environ, check_seal=False).data
    roots = tuple(dict.fromkeys(Path(r) for r in data.get("plugin_roots") or []))
    allow = (data.get("service") or {}).get("allow_symlinks") is True
    return data, discover_plugins(roots, allow_symlinks=allow)


def configured_fingerprints(config_dir: Path) -> tuple[list[PluginFingerprint] | None, list[str], Discovery | None]:
    """Fingerprints of the plugins `config_dir` configures, a note per plugin that could not be
    fingerprinted, and the discovery. None and a note when the config itself does not read."""
    try:
        data, discovery = _discover(config_dir)
    except ConfigError as exc:
        return None, [f"plugin fingerprints were left as they were: the config does not load: {exc}"], None
    plugins = data.get("plugins")
    if not isinstance(plugins, dict):
        plugins = {}
    found, notes = [], []
    for name, raw in plugins.items():
        raw = raw if isinstance(raw, dict) else {}
        uses = raw.get("uses") or name
        manifest = discovery.manifests.get(uses)
        if manifest is None:
            notes.append(f"plugin {name!r} is not fingerprinted: no loadable plugin named {uses!r} in the plugin roots")
            continue
        try:
            found.append(fingerprint_of(name, manifest, enabled=raw.get("enabled", True) is not False))
        except OSError as exc:
            notes.append(f"plugin {name!r} is not fingerprinted: {manifest.declared_entrypoint}: {exc.strerror}")
    return found, notes, discovery


def lock_config(config_dir: Path, *, dry_run: bool = False) -> tuple[LockReport, list[str]]:
    """`config lock`: seal every config file and fingerprint every configured plugin."""
    fingerprints, notes, _ = configured_fingerprints(config_dir)
    return lock(config_dir, config_files(config_dir), plugins=fingerprints, dry_run=dry_run), notes


def lock_plugins(
    config_dir: Path, names: Iterable[str] | None, *, dry_run: bool = False
) -> tuple[LockReport, list[str]]:
    """`plugin lock NAME...` (`names` None: every configured plugin): fingerprint these plugins and
    nothing else. A name may be a discovered plugin not configured yet, to authorize its code
    before `config set` adds it."""
    fingerprints, notes, discovery = configured_fingerprints(config_dir)
    if fingerprints is None or discovery is None:
        raise ConfigError([ConfigProblem(notes[0])])
    if names is None:
        return seal_plugins(config_dir, fingerprints, dry_run=dry_run), notes
    by_name = {fp.name: fp for fp in fingerprints}
    wanted = []
    for name in names:
        if name in by_name:
            wanted.append(by_name[name])
        elif name in discovery.manifests:
            wanted.append(fingerprint_of(name, discovery.manifests[name]))
        else:
            reason = next((n for n in notes if n.startswith(f"plugin {name!r} ")), None)
            raise ConfigError([ConfigProblem(reason or f"no plugin {name!r} is configured or in the plugin roots")])
    return seal_plugins(config_dir, wanted, dry_run=dry_run), []
