"""The CLI's config mutations (Operator Handbook "Config"): `config set`, `config token
create|delete`, `config scope add|remove|set` and `config init`. Each is planned first (every file
it would write, as text), then applied as one unit: written atomically, re-sealed, validated, and
rolled back whole if the result does not load. A change that would leave the gateway unable to
start writes nothing.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from gateway.config.address import AddressError, resolve
from gateway.config.atomic import write_atomic
from gateway.config.edit import EditError, delete_value, set_value
from gateway.config.integrity import CHECKSUMS, Tier, digest, file_digest, read_seal, reseal, scope_file_path, tier_of
from gateway.config.loader import ROOT_FILE, MergedConfig, load_config_tree
from gateway.config.tokens import ADMIN, FINER, RESOURCES
from gateway.config.yamlsrc import KeyPath, Yaml12Loader
from gateway.plugins.seal import lock_config
from gateway.runtime import build_runtime
from ledger.timestamps import rfc3339

STARTER = Path(__file__).resolve().parents[1] / "config" / "starter"  # `config init`'s templates
_TOKEN_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class ChangeRefused(Exception):
    """The change cannot be made as asked (a usage or state problem, not an invalid result)."""


@dataclass(frozen=True)
class FileChange:
    path: Path
    before: str | None  # None: the file is new
    after: str
    private: bool = False  # holds a secret or a scope grant: written 0600

    def diff(self) -> str:
        before = (self.before or "").splitlines(keepends=True)
        label = str(self.path)
        lines = difflib.unified_diff(
            before, self.after.splitlines(keepends=True), "/dev/null" if self.before is None else label, label
        )
        return "".join(lines)


def parse_value(text: str) -> Any:
    """A `config set` value as YAML 1.2 reads it: `false`, `3`, `5m`, `[a, b]`, `{k: v}`."""
    try:
        return yaml.load(text, Loader=Yaml12Loader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ChangeRefused(f"cannot read the value {text!r} as YAML: {exc}") from exc


# -- config set --------------------------------------------------------------------------------


def plan_set(config_dir: Path, assignment: str, environ: Mapping[str, str]) -> tuple[FileChange, KeyPath]:
    """The edit `PATH=VALUE` makes: in the file where that key (or its nearest parent) is defined,
    validated as the whole config would load with it. ConfigError when the result is invalid."""
    target, sep, raw = assignment.partition("=")
    if not sep or not target.strip():
        raise ChangeRefused(f"expected PATH=VALUE, got {assignment!r}")
    merged = load_config_tree(config_dir, environ)
    try:
        address = resolve(target.strip(), merged.data)
    except AddressError as exc:
        raise ChangeRefused(str(exc)) from exc
    if address.wildcard:
        raise ChangeRefused(f"{target} names every item; set one key at a time")
    file, in_file = _locate(merged, address.path)
    before = file.read_text(encoding="utf-8")
    try:
        after = set_value(before, in_file, parse_value(raw))
    except EditError as exc:
        raise ChangeRefused(f"{file}: {exc}") from exc
    _validate(config_dir, environ, overrides={file: after})
    return FileChange(file, before, after), address.path


def plan_append(config_dir: Path, key: KeyPath, item: Any, environ: Mapping[str, str]) -> FileChange:
    """`item` appended to the list at `key` (`routes`, `webhooks.endpoints`) in the file that
    defines that list (config.yaml when none does), validated as the config would load with it."""
    merged = load_config_tree(config_dir, environ)
    file, in_file = _locate(merged, key)
    before = file.read_text(encoding="utf-8")
    listed: Any = yaml.load(before, Loader=Yaml12Loader) or {}
    for part in in_file:
        listed = listed.get(part) if isinstance(listed, dict) else None
    return _edited(config_dir, environ, file, before, lambda text: set_value(text, (*in_file, len(listed or [])), item))


def plan_remove(config_dir: Path, path: KeyPath, environ: Mapping[str, str]) -> FileChange:
    """The key or list item at `path` (of the merged config) removed from the file defining it."""
    file, in_file = _locate(load_config_tree(config_dir, environ), path)
    before = file.read_text(encoding="utf-8")
    return _edited(config_dir, environ, file, before, lambda text: delete_value(text, in_file))


def _edited(config_dir: Path, environ: Mapping[str, str], file: Path, before: str, edit: Any) -> FileChange:
    try:
        after = edit(before)
    except EditError as exc:
        raise ChangeRefused(f"{file}: {exc}") from exc
    _validate(config_dir, environ, overrides={file: after})
    return FileChange(file, before, after)


def _locate(merged: MergedConfig, path: KeyPath) -> tuple[Path, KeyPath]:
    """The file defining `path` and the key's path inside it; for a new key, the file defining its
    nearest parent (a new top-level key goes to config.yaml)."""
    for depth in range(len(path), 0, -1):
        origin = merged.origins.get(path[:depth])
        if origin is not None and origin.path is not None:
            return origin.file, (*origin.path, *path[depth:])
    return merged.config_dir / ROOT_FILE, path


def _validate(
    config_dir: Path, environ: Mapping[str, str], overrides: Mapping[Path, str] | None = None, strict: bool = False
) -> None:
    build_runtime(config_dir, environ, overrides=overrides, strict=strict)


# -- config token create -----------------------------------------------------------------------


def token_env_var(name: str) -> str:
    return "DUCTILE_TOKEN_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def scope_problems(scopes: Sequence[str], plugins: Sequence[str]) -> list[str]:
    """Why each scope cannot be granted (spec 000 §9.4 spellings); a plugin scope must name a
    configured plugin."""
    problems = []
    for scope in scopes:
        verb, _, resource = scope.partition(":")
        if scope == ADMIN or scope in FINER or (verb in ("read", "write") and resource in RESOURCES):
            continue
        if resource in ("ro", "rw") and (verb in RESOURCES or verb in plugins):
            continue
        if resource in ("ro", "rw"):
            problems.append(f"{scope!r}: no plugin {verb!r} is configured")
        else:
            known = ", ".join([*(f"{r}:ro|rw" for r in RESOURCES), *FINER])
            problems.append(f"{scope!r} is not a scope (use *, {known}, or PLUGIN:ro|rw)")
    return problems


def plan_token(
    config_dir: Path, name: str, scopes: Sequence[str], description: str, environ: Mapping[str, str]
) -> tuple[list[FileChange], str, str]:
    """The files `config token create` writes: `scopes/NAME.json`, a `tokens.yaml` entry whose key
    is `${DUCTILE_TOKEN_NAME}`, that variable in the config's `.env` (so the token works at once
    and the secret stays out of YAML), and `config.yaml` includes for both when missing.
    Returns the changes, the secret and the variable's name."""
    if not _TOKEN_NAME.match(name):
        raise ChangeRefused(f"token name {name!r}: use lower-case letters, digits, '-' and '_' (at most 63)")
    merged = load_config_tree(config_dir, environ)
    if not scopes:
        raise ChangeRefused("give at least one scope (--scopes a,b)")
    if problems := scope_problems(scopes, list(merged.data.get("plugins") or {})):
        raise ChangeRefused("; ".join(problems))
    taken = {str(t.get("name")) for t in merged.data.get("tokens") or [] if isinstance(t, dict)}
    taken |= {str(t.get("name")) for t in ((merged.data.get("api") or {}).get("auth") or {}).get("tokens") or []}
    if name in taken:
        raise ChangeRefused(f"a token named {name!r} exists already")
    scope_file = config_dir / "scopes" / f"{name}.json"
    if scope_file.exists():
        raise ChangeRefused(f"{scope_file} exists already; refusing to overwrite it")
    variable = token_env_var(name)
    if variable in os.environ:
        raise ChangeRefused(f"{variable} is set in this process's environment and would override the new secret")
    secret = secrets.token_hex(32)
    now = rfc3339(datetime.now(UTC), "seconds")
    scope_doc = {"scopes": list(scopes), "metadata": {"description": description, "created_at": now}}
    scope_text = json.dumps(scope_doc, indent=2) + "\n"
    entry = {
        "name": name,
        "key": f"${{{variable}}}",
        "scopes_file": f"scopes/{name}.json",
        "scopes_hash": "blake3:" + digest(scope_text.encode()),
        "description": description,
        "created_at": now,
    }
    changes = [FileChange(scope_file, None, scope_text, private=True)]
    tokens_file = config_dir / "tokens.yaml"
    before = tokens_file.read_text(encoding="utf-8") if tokens_file.exists() else None
    listed = (yaml.load(before, Loader=Yaml12Loader) or {}).get("tokens") if before else None
    header = "# API tokens (high security: sealed in .checksums). Keys come from the environment.\n"
    changes.append(
        FileChange(tokens_file, before, set_value(before or header, ("tokens", len(listed or [])), entry), True)
    )
    root = config_dir / ROOT_FILE
    root_text = root.read_text(encoding="utf-8")
    root_doc = yaml.load(root_text, Loader=Yaml12Loader) or {}
    if tokens_file.resolve() not in {f.resolve() for f in merged.files}:
        root_text = set_value(root_text, ("include", len(root_doc.get("include") or [])), "tokens.yaml")
    env_files = [f for f in merged.env_files if f.parent == config_dir.resolve()]
    env_file = env_files[0] if env_files else config_dir / ".env"
    if not env_files:
        listed_env = (root_doc.get("environment_vars") or {}).get("include") or []
        root_text = set_value(root_text, ("environment_vars", "include", len(listed_env)), ".env")
    if root_text != root.read_text(encoding="utf-8"):
        changes.append(FileChange(root, root.read_text(encoding="utf-8"), root_text))
    env_before = env_file.read_text(encoding="utf-8") if env_file.exists() else None
    env_after = (env_before or "") + ("\n" if env_before and not env_before.endswith("\n") else "")
    changes.append(FileChange(env_file, env_before, env_after + f"{variable}={secret}\n", private=True))
    return changes, secret, variable


# -- config init -------------------------------------------------------------------------------


def plan_init(target: Path, plugin_root: Path) -> tuple[list[FileChange], str]:
    """A starter config directory: commented examples of every file, the bundled plugins, and an
    admin token whose secret lives in `.env`. Refuses a directory that already has a config."""
    if (target / ROOT_FILE).exists():
        raise ChangeRefused(f"{target / ROOT_FILE} exists already; `config init` never overwrites a config")
    secret = secrets.token_hex(32)
    values = {"plugin_root": str(plugin_root), "admin_var": token_env_var("admin")}
    changes = []
    for template in sorted(STARTER.rglob("*")):
        if template.is_file():
            relative = template.relative_to(STARTER)
            text = template.read_text(encoding="utf-8")
            for key, value in values.items():
                text = text.replace(f"@{key}@", value)
            private = tier_of(target / relative) is Tier.HIGH_SECURITY
            changes.append(FileChange(target / relative, None, text, private=private))
    scope_text = changes_by_name(changes, "admin.json").after
    tokens = changes_by_name(changes, "tokens.yaml")
    tokens_text = tokens.after.replace("BLAKE3_OF_ADMIN_JSON", "blake3:" + digest(scope_text.encode()))
    changes[changes.index(tokens)] = FileChange(tokens.path, None, tokens_text, private=True)
    changes.append(FileChange(target / ".env", None, f"{values['admin_var']}={secret}\n", private=True))
    return changes, secret


# -- config token list|inspect|delete, config scope ---------------------------------------------

SCOPE_MODES = ("add", "remove", "set")


@dataclass(frozen=True)
class RegistryToken:
    """A `tokens:` entry of the registry (tokens.yaml) as written, with where it is."""

    index: int
    entry: Mapping[str, Any]
    file: Path  # the file defining it
    path: KeyPath  # its path inside that file

    @property
    def name(self) -> str:
        return str(self.entry.get("name", ""))

    def report(self, config_dir: Path) -> dict[str, Any]:
        """What `config token list|inspect` show: never the key, which is a secret or names one."""
        scopes_file = self.entry.get("scopes_file")
        scope_path = scope_file_path(config_dir, str(scopes_file)) if scopes_file else None
        current = file_digest(scope_path) if scope_path else None
        scopes: Any = None
        if scope_path is not None and current is not None:
            try:
                scopes = json.loads(scope_path.read_text(encoding="utf-8")).get("scopes")
            except (OSError, ValueError, AttributeError):
                scopes = None
        recorded = self.entry.get("scopes_hash")
        return {
            "name": self.name,
            "key": "[redacted]",
            "scopes_file": scopes_file,
            "scopes_hash": recorded,
            "current_hash": f"blake3:{current}" if current else None,
            "hash_matches": bool(current) and recorded == f"blake3:{current}",
            "scopes": scopes,
            "description": self.entry.get("description") or "",
            "created_at": self.entry.get("created_at"),
            "defined_in": str(self.file),
        }


def registry_tokens(config_dir: Path, environ: Mapping[str, str], *, check_seal: bool = True) -> list[RegistryToken]:
    """`check_seal=False` for reading only: a token whose scope file was edited past its seal is
    what `config token inspect` is for."""
    merged = load_config_tree(config_dir, environ, check_seal=check_seal)
    found = []
    for index, entry in enumerate(merged.data.get("tokens") or []):
        if isinstance(entry, dict):
            file, path = _locate(merged, ("tokens", index))
            found.append(RegistryToken(index, entry, file, path))
    return found


def registry_token(
    config_dir: Path, name: str, environ: Mapping[str, str], *, check_seal: bool = True
) -> RegistryToken:
    tokens = registry_tokens(config_dir, environ, check_seal=check_seal)
    for token in tokens:
        if token.name == name:
            return token
    known = ", ".join(t.name for t in tokens) or "none"
    raise ChangeRefused(f"no token named {name!r} in the token registry (tokens.yaml; known: {known})")


def plan_token_delete(
    config_dir: Path, name: str, environ: Mapping[str, str]
) -> tuple[list[FileChange], RegistryToken]:
    """The registry entry removed, and the `${VAR}` line `config token create` wrote for it in
    the config's `.env`; its scope file is kept (as the original does: a record of what it had)."""
    token = registry_token(config_dir, name, environ)
    before = token.file.read_text(encoding="utf-8")
    try:
        changes = [FileChange(token.file, before, delete_value(before, token.path), private=True)]
    except EditError as exc:
        raise ChangeRefused(f"{token.file}: {exc}") from exc
    written: Any = yaml.load(before, Loader=Yaml12Loader)  # the key as written, before interpolation
    for part in token.path:
        written = written[part]
    variable = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", str(written.get("key", "")))
    if variable:
        for env_file in load_config_tree(config_dir, environ).env_files:
            text = env_file.read_text(encoding="utf-8") if env_file.exists() else ""
            lines = text.splitlines(keepends=True)
            kept = [line for line in lines if not line.startswith(f"{variable[1]}=")]
            if len(kept) != len(lines):
                changes.append(FileChange(env_file, text, "".join(kept), private=True))
    return changes, token


def plan_token_rehash(
    config_dir: Path, name: str, environ: Mapping[str, str]
) -> tuple[list[FileChange], RegistryToken, str]:
    """The original's `token rehash`: a scope file edited by hand, authorized as it now is. Its
    `scopes_hash` is moved to the file's current hash and both files are re-sealed (the scope
    file is listed unchanged so that `apply` re-seals it). Read past the seal: the edit is why."""
    token = registry_token(config_dir, name, environ, check_seal=False)
    scopes_file = token.entry.get("scopes_file")
    if not scopes_file:
        raise ChangeRefused(f"token {name!r} has no scopes_file: nothing to rehash")
    scope_path = scope_file_path(config_dir, str(scopes_file))
    try:
        scope_text = scope_path.read_text(encoding="utf-8")
        json.loads(scope_text)
    except OSError as exc:
        raise ChangeRefused(f"cannot read {scope_path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ChangeRefused(f"{scope_path} is not JSON: {exc}; fix it before authorizing it") from exc
    new_hash = "blake3:" + digest(scope_text.encode())
    before = token.file.read_text(encoding="utf-8")
    changes = [
        FileChange(scope_path, scope_text, scope_text, private=True),
        FileChange(token.file, before, set_value(before, (*token.path, "scopes_hash"), new_hash), private=True),
    ]
    return changes, token, new_hash


def plan_scope(
    config_dir: Path, name: str, mode: str, scopes: Sequence[str], environ: Mapping[str, str]
) -> tuple[list[FileChange], list[str], RegistryToken]:
    """The token's scope file with `scopes` added, removed or set (its metadata kept), and its
    `scopes_hash` in the registry moved with it, so the token keeps loading."""
    token = registry_token(config_dir, name, environ)
    scopes_file = token.entry.get("scopes_file")
    if not scopes_file:
        raise ChangeRefused(f"token {name!r} has no scopes_file: its scopes are not a scope file's to change")
    if not scopes:
        raise ChangeRefused("give at least one scope")
    merged = load_config_tree(config_dir, environ)
    if mode != "remove" and (problems := scope_problems(scopes, list(merged.data.get("plugins") or {}))):
        raise ChangeRefused("; ".join(problems))
    scope_path = scope_file_path(config_dir, str(scopes_file))
    try:
        before_scope = scope_path.read_text(encoding="utf-8")
        document = json.loads(before_scope)
    except OSError as exc:
        raise ChangeRefused(f"cannot read {scope_path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ChangeRefused(f"{scope_path} is not JSON: {exc}") from exc
    current = [str(s) for s in document.get("scopes") or []]
    if mode == "add":
        updated = list(dict.fromkeys([*current, *scopes]))
    elif mode == "remove":
        updated = [s for s in current if s not in scopes]
    else:
        updated = list(dict.fromkeys(scopes))
    if not updated:
        raise ChangeRefused(f"token {name!r} would be left with no scope: delete it instead (config token delete)")
    scope_text = json.dumps({**document, "scopes": updated}, indent=2) + "\n"
    before = token.file.read_text(encoding="utf-8")
    registry_text = set_value(before, (*token.path, "scopes_hash"), "blake3:" + digest(scope_text.encode()))
    changes = [
        FileChange(scope_path, before_scope, scope_text, private=True),
        FileChange(token.file, before, registry_text, private=True),
    ]
    return changes, updated, token


def changes_by_name(changes: Sequence[FileChange], name: str) -> FileChange:
    return next(c for c in changes if c.path.name == name)


# -- applying ----------------------------------------------------------------------------------


def make_directory(path: Path) -> None:
    """A config directory (or one under it), and any missing parent, created 0700 (spec 000
    §13.2, "Default Permissions"); one that exists keeps its mode."""
    if path.is_dir():
        return
    make_directory(path.parent)
    path.mkdir(mode=0o700, exist_ok=True)


def apply(config_dir: Path, changes: Sequence[FileChange], environ: Mapping[str, str]) -> list[Path]:
    """Write the changes, keep the seal in step, and check the result loads; on any failure put
    every file (the seal included) back as it was and re-raise. Returns the files sealed.

    The seal: files it already listed, and new files, get their new hashes (no other file's
    unreviewed change is blessed). A config without a seal that gains a high-security file is
    locked whole, since high-security files refuse to load unsealed."""
    seal_path = config_dir / CHECKSUMS
    saved = {c.path: c.before for c in changes}
    saved_seal = seal_path.read_text(encoding="utf-8") if seal_path.exists() else None
    try:
        for change in changes:
            make_directory(change.path.parent)
            write_atomic(change.path, change.after, mode=0o600 if change.private else None)
        seal = read_seal(config_dir)
        if seal is not None:
            sealed = [c.path for c in changes if c.before is None or str(c.path) in seal.hashes]
            reseal(config_dir, sealed)
        elif any(tier_of(c.path) is Tier.HIGH_SECURITY for c in changes):
            sealed = [f.path for f in lock_config(config_dir)[0].files]
        else:
            sealed = []
        _validate(config_dir, environ)
        return sealed
    except BaseException:
        for path, before in saved.items():
            if before is None:
                path.unlink(missing_ok=True)
            else:
                write_atomic(path, before)
        if saved_seal is None:
            seal_path.unlink(missing_ok=True)
        else:
            write_atomic(seal_path, saved_seal, mode=0o600)
        raise
