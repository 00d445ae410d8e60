"""Reading a config directory: `config.yaml`, its includes, `.env` files and `${VAR}`s, merged.

Spec 000 "Configuration Specification" §3 (grafting) and §6 (interpolation). Pure reading: the
result is a merged document plus where every key came from; typing happens in `model.py`.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError, ConfigProblem
from .integrity import Verdict, file_digest, scope_file_path, scope_files, verify
from .yamlsrc import KeyPath, YamlDocument, dotted, load_yaml_file, parse_yaml, plain_scalar_value

ROOT_FILE = "config.yaml"
_VAR = re.compile(r"\$\{([^}]*)\}")
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Keys holding filesystem paths: resolved against the declaring file, never interpolated
# (spec §6: "Interpolation is forbidden in file paths ... to ensure a static, verifiable tree").
PATH_LISTS: tuple[KeyPath, ...] = (("include",), ("environment_vars", "include"), ("plugin_roots",))
PATH_SCALARS: tuple[KeyPath, ...] = (("state", "path"), ("service", "backup", "directory"))
# Loader directives that describe files, not the running gateway.
_DIRECTIVES = ("include", "environment_vars")


@dataclass(frozen=True)
class Origin:
    file: Path
    line: int | None
    # The key's path inside `file`, which differs from the merged path where lists were appended
    # across files (`pipelines[3]` may be `pipelines[0]` of pipelines.yaml): `config set` edits it.
    path: KeyPath | None = None


@dataclass
class MergedConfig:
    config_dir: Path
    data: dict[str, Any]
    origins: dict[KeyPath, Origin]
    files: list[Path]
    env_files: list[Path]
    warnings: list[ConfigProblem] = field(default_factory=list)
    # The seal's verdict on every file read; the loader's caller decides strictness.
    integrity: Verdict = field(default_factory=Verdict)
    # DATABASE_URL names the ledger (PostgreSQL): several nodes may share it, so a plugin's
    # cluster-wide `parallelism` may exceed one node's `max_workers`.
    shared_ledger: bool = False

    def origin_of(self, path: KeyPath) -> Origin | None:
        while path:
            if path in self.origins:
                return self.origins[path]
            path = path[:-1]
        return None

    def problem(self, path: KeyPath, message: str) -> ConfigProblem:
        origin = self.origin_of(path)
        return ConfigProblem(
            message,
            file=origin.file if origin else self.config_dir / ROOT_FILE,
            line=origin.line if origin else None,
            key=dotted(path) or None,
        )


def resolve_config_dir(explicit: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Path:
    """`--config-dir`, else `DUCTILE_CONFIG_DIR`, else `~/.config/ductile`."""
    chosen = explicit or environ.get("DUCTILE_CONFIG_DIR") or "~/.config/ductile"
    return Path(os.path.expanduser(str(chosen))).resolve()


def load_config_tree(
    config_dir: Path,
    environ: Mapping[str, str],
    overrides: Mapping[Path, str] | None = None,
    *,
    check_seal: bool = True,
) -> MergedConfig:
    """Read, verify against the seal, and merge the tree. Raises ConfigError with every problem of
    every file read: include, path and `.env` problems together with unset variables and
    high-security integrity refusals, so one run shows all of them.

    `overrides`: proposed new text for some files (`config set` validates its edit before writing
    it); such a file is verified as it is on disk, since the edit re-seals it. `check_seal=False`: the
    seal's refusals do not stop the read (`config lock` reads the config whose seal it rewrites)."""
    config_dir = Path(os.path.abspath(config_dir))
    reader = _TreeReader(config_dir, overrides)
    reader.read(config_dir / ROOT_FILE, chain=())
    # Verified before interpolation (Configuration Specification §6): the hashes are of the bytes
    # as read, so no `${VAR}` value can change what was checked.
    integrity = verify(config_dir, reader.digests())
    env = _environment(reader, environ)
    merged = MergedConfig(config_dir, {}, {}, [d.file for d in reader.docs], reader.env_files, reader.warnings)
    merged.integrity = integrity
    merged.shared_ledger = bool(environ.get("DATABASE_URL"))
    problems: list[ConfigProblem] = [*reader.problems, *(integrity.refusals if check_seal else ())]
    for doc in reader.docs:
        _interpolate(doc, doc.data, (), env, problems)
    if problems:
        raise ConfigError(problems)
    for doc in reader.docs:
        body = {k: v for k, v in doc.data.items() if k not in _DIRECTIVES and not str(k).startswith("x-")}
        if isinstance(body.get("webhooks"), list):
            _merge_webhook_list(merged, doc, body.pop("webhooks"))
        _merge(merged, merged.data, body, doc, (), ())
    _fill_empty_entries(merged.data)
    return merged


def config_files(config_dir: Path) -> list[Path]:
    """Every file the config in `config_dir` is made of, as `config lock` seals it: `config.yaml`,
    its includes, `.env` files and scope files. Raises ConfigError when the tree cannot be read."""
    reader = _TreeReader(Path(os.path.abspath(config_dir)))
    reader.read(reader.config_dir / ROOT_FILE, chain=())
    if reader.problems:
        raise ConfigError(reader.problems)
    return list(reader.digests())


def _fill_empty_entries(data: dict[str, Any]) -> None:
    """An empty section (`plugins:`) or plugin entry (`echo:`) means "nothing set", not null."""
    for section in ("plugins", "routes", "pipelines", "webhooks"):
        if section in data and data[section] is None:
            del data[section]
    plugins = data.get("plugins")
    if isinstance(plugins, dict):
        for name, entry in plugins.items():
            if entry is None:
                plugins[name] = {}


class _TreeReader:
    def __init__(self, config_dir: Path, overrides: Mapping[Path, str] | None = None):
        self.config_dir = config_dir
        self.overrides = overrides or {}
        self.docs: list[YamlDocument] = []
        self.env_files: list[Path] = []
        self.problems: list[ConfigProblem] = []
        self.warnings: list[ConfigProblem] = []
        self._seen: set[Path] = set()  # real paths (symlinks followed), as are `chain`s

    def digests(self) -> dict[Path, str | None]:
        """Hash of every file read: YAML as parsed, `.env` files, and the scope files (those under
        `scopes/` and those a token names), which the token registry reads later."""
        found: dict[Path, str | None] = {doc.file: doc.digest for doc in self.docs}
        for path in [*self.env_files, *scope_files(self.config_dir), *self._named_scope_files()]:
            found.setdefault(path, file_digest(path))
        return found

    def _named_scope_files(self) -> list[Path]:
        named = []
        for doc in self.docs:
            entries = doc.data.get("tokens")
            for entry in entries if isinstance(entries, list) else []:
                name = entry.get("scopes_file") if isinstance(entry, dict) else None
                if isinstance(name, str) and "${" not in name:
                    path = scope_file_path(self.config_dir, name)
                    if path.is_file():
                        named.append(Path(os.path.abspath(path)))
        return named

    def read(self, path: Path, chain: tuple[Path, ...]) -> None:
        if not path.is_file():
            if not chain:
                self.problems.append(
                    ConfigProblem(f"{ROOT_FILE} not found in config directory {path.parent}", file=path)
                )
            return
        try:
            if path in self.overrides:
                doc = parse_yaml(self.overrides[path], path)
                doc.digest = file_digest(path)
            else:
                doc = load_yaml_file(path)
        except ConfigError as exc:
            self.problems.extend(exc.problems)
            return
        if doc.data is None:
            doc.data = {}
        if not isinstance(doc.data, dict):
            self.problems.append(ConfigProblem("the top level must be a mapping of keys", file=path, line=1))
            return
        self._seen.add(path.resolve())
        self._resolve_paths(doc)
        self.docs.append(doc)
        for index, include in enumerate(_path_list(doc, ("include",))):
            self._include(doc, index, Path(include), (*chain, path.resolve()))
        for index, env_file in enumerate(_path_list(doc, ("environment_vars", "include"))):
            if not Path(env_file).is_file():
                self.problems.append(
                    ConfigProblem(
                        f"environment file {env_file} does not exist",
                        file=path,
                        line=doc.line_of(("environment_vars", "include", index)),
                        key=f"environment_vars.include[{index}]",
                    )
                )
            else:
                self.env_files.append(Path(env_file))

    def _include(self, doc: YamlDocument, index: int, target: Path, chain: tuple[Path, ...]) -> None:
        where = {"file": doc.file, "line": doc.line_of(("include", index)), "key": f"include[{index}]"}
        if target.is_dir():
            files = sorted(p for p in target.glob("*.yaml") if p.is_file())
        elif target.is_file():
            files = [target]
        else:
            self.problems.append(ConfigProblem(f"included path {target} does not exist", **where))  # type: ignore[arg-type]
            return
        for file in files:
            if file.resolve() in chain:
                cycle = " -> ".join(str(p) for p in (*chain, file.resolve()))
                self.problems.append(ConfigProblem(f"include cycle: {cycle}", **where))  # type: ignore[arg-type]
            elif file.resolve() in self._seen:
                self.warnings.append(
                    ConfigProblem(f"{file} is included more than once; later includes are ignored", **where)  # type: ignore[arg-type]
                )
            else:
                self.read(file, chain)

    def _resolve_paths(self, doc: YamlDocument) -> None:
        base = doc.file.parent
        for path in PATH_LISTS:
            value = dig(doc.data, path)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                self._bad_path(doc, path, "expected a list of paths")
                continue
            resolved = []
            for index, item in enumerate(value):
                if self._check_path(doc, (*path, index), item):
                    resolved.append(resolve_path(base, item))
            _set(doc.data, path, resolved)
        for path in PATH_SCALARS:
            value = dig(doc.data, path)
            if value is None:
                continue
            if not isinstance(value, str):
                self._bad_path(doc, path, "expected a path")
            elif self._check_path(doc, path, value):
                _set(doc.data, path, resolve_path(base, value))

    def _check_path(self, doc: YamlDocument, path: KeyPath, value: str) -> bool:
        if not value.strip():
            # Why refuse: an empty path would silently mean the declaring file's own directory.
            self._bad_path(doc, path, f"an empty path is not allowed (it would mean {doc.file.parent})")
            return False
        if "${" in value:
            self._bad_path(doc, path, f"${{VAR}} interpolation is not allowed in paths (got {value!r})")
            return False
        return True

    def _bad_path(self, doc: YamlDocument, path: KeyPath, message: str) -> None:
        self.problems.append(ConfigProblem(message, file=doc.file, line=doc.line_of(path), key=dotted(path)))


def _environment(reader: _TreeReader, environ: Mapping[str, str]) -> dict[str, str]:
    """`.env` values (later files win among themselves) under the process environment, which always wins."""
    env: dict[str, str] = {}
    if reader.env_files:
        # Imported here: python-dotenv is ~7 ms of every process's start, and most config
        # directories have no `.env` (docs/performance-history.md, "Where the start-up goes").
        from dotenv import dotenv_values

        for env_file in reader.env_files:
            env.update({k: v for k, v in dotenv_values(env_file, interpolate=False).items() if v is not None})
    env.update(environ)
    return env


def _interpolate(
    doc: YamlDocument, node: Any, path: KeyPath, env: Mapping[str, str], problems: list[ConfigProblem]
) -> Any:
    # Not in loader directives or paths (refused there, see `_check_path`), nor in top-level `x-`
    # keys, which are ignored: an anchor is interpolated where it is used.
    if path and (path[0] in _DIRECTIVES or str(path[0]).startswith("x-")):
        return node
    if path in PATH_SCALARS or path[:-1] in PATH_LISTS:
        return node
    if isinstance(node, dict):
        for key in list(node):
            node[key] = _interpolate(doc, node[key], (*path, key), env, problems)
        return node
    if isinstance(node, list):
        for index, item in enumerate(node):
            node[index] = _interpolate(doc, item, (*path, index), env, problems)
        return node
    if isinstance(node, str) and "${" in node:

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if not _VAR_NAME.fullmatch(name):
                problems.append(
                    ConfigProblem(f"invalid variable reference ${{{name}}}", doc.file, doc.line_of(path), dotted(path))
                )
                return match.group(0)
            if name not in env:
                problems.append(
                    ConfigProblem(
                        f"environment variable {name} is not set (referenced as ${{{name}}})",
                        doc.file,
                        doc.line_of(path),
                        dotted(path),
                    )
                )
                return match.group(0)
            return env[name]

        before = len(problems)
        text = _VAR.sub(replace, node)
        if path in doc.plain and len(problems) == before:
            return plain_scalar_value(text)
        return text
    return node


def _merge(
    merged: MergedConfig,
    target: dict[str, Any],
    source: dict[str, Any],
    doc: YamlDocument,
    target_path: KeyPath,
    source_path: KeyPath,
) -> None:
    """Maps merge, arrays append, scalars: later wins (spec §3.1)."""
    for key, value in source.items():
        tpath, spath = (*target_path, key), (*source_path, key)
        existing = target.get(key)
        if value is None and isinstance(existing, dict | list):
            # `plugins:` with every entry commented out adds nothing; it does not erase the map.
            continue
        if isinstance(existing, dict) and isinstance(value, dict):
            merged.origins.setdefault(tpath, Origin(doc.file, doc.line_of(spath), spath))
            _merge(merged, existing, value, doc, tpath, spath)
        elif isinstance(existing, list) and isinstance(value, list):
            offset = len(existing)
            existing.extend(copy.deepcopy(value))
            for index, item in enumerate(value):
                _record(merged, doc, (*tpath, offset + index), (*spath, index), item)
        else:
            target[key] = copy.deepcopy(value)
            _record(merged, doc, tpath, spath, value, replaced=existing)


def _merge_webhook_list(merged: MergedConfig, doc: YamlDocument, endpoints: list[Any]) -> None:
    """`webhooks:` written as a bare list (Configuration Specification §4.3) means
    `webhooks: {endpoints: …}` (WEBHOOKS.md). Merged as such, so a list in webhooks.yaml appends to
    the endpoints of config.yaml's `webhooks: {listen: …}` instead of replacing the map."""
    target = merged.data.get("webhooks")
    if not isinstance(target, dict):
        target = merged.data["webhooks"] = {}
        merged.origins[("webhooks",)] = Origin(doc.file, doc.line_of(("webhooks",)), ("webhooks",))
    existing = target.get("endpoints")
    if not isinstance(existing, list):
        existing = target["endpoints"] = []
    offset = len(existing)
    existing.extend(copy.deepcopy(endpoints))
    for index, endpoint in enumerate(endpoints):
        _record(merged, doc, ("webhooks", "endpoints", offset + index), ("webhooks", index), endpoint)


def _record(
    merged: MergedConfig, doc: YamlDocument, tpath: KeyPath, spath: KeyPath, value: Any, replaced: Any = None
) -> None:
    """`value`, at `spath` in `doc`, now sits at `tpath` (replacing `replaced`): where each of its
    keys came from. Why walk the values rather than every origin and line: that was quadratic, and
    most of checking a config of a few hundred plugins (issue 12)."""
    for path in _key_paths(replaced):
        merged.origins.pop((*tpath, *path), None)
    merged.origins[tpath] = Origin(doc.file, doc.line_of(spath), spath)
    for path in _key_paths(value):
        line = doc.lines.get((*spath, *path))
        if line is not None:
            merged.origins[(*tpath, *path)] = Origin(doc.file, line, (*spath, *path))


def _key_paths(value: Any) -> Iterator[KeyPath]:
    """The path of every key and list item under `value`, relative to it."""
    stack: list[tuple[KeyPath, Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            stack.append(((*path, key), child))
            yield (*path, key)


def resolve_path(base: Path, value: str) -> str:
    """A path key's value as the loader stores it: `~` expanded, relative to the declaring file's directory."""
    path = Path(os.path.expanduser(value))
    return str(path if path.is_absolute() else (base / path).resolve())


def _path_list(doc: YamlDocument, path: KeyPath) -> list[str]:
    """The (resolved) paths listed at `path`; nothing when it is not a list of paths (a problem already)."""
    value = dig(doc.data, path)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    return []


def dig(data: Any, path: KeyPath) -> Any:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _set(data: dict[str, Any], path: KeyPath, value: Any) -> None:
    for part in path[:-1]:
        data = data[part]  # type: ignore[index]
    data[path[-1]] = value  # type: ignore[index]
