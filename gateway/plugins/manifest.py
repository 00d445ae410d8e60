"""Plugin manifests: parsed, validated (spec 000 §5.4, §5.5 and "The Manifest"), typed.

Strict where the spec is (spec/version/protocol, entrypoint trust, fact_outputs naming declared
commands, stopwatch.max_subs 1-256) and tolerant where real plugins are (unknown keys warn,
hyphenated names, custom command names, placeholder event names in `values.emit`).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import blake3

from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.frozen import freeze
from gateway.config.validity import describe, schema_errors, unknown_keys
from gateway.config.yamlsrc import YamlDocument, coerce_yaml11_booleans, dotted, parse_yaml

from .environment import plugin_environment
from .interpreter import missing_interpreter

SUPPORTED_PROTOCOLS = frozenset({2})
DEFAULT_MAX_SUBS = 32
MANIFEST_FILE = "manifest.yaml"


@dataclass(frozen=True)
class CommandSpec:
    name: str
    type: str  # read | write; write when the manifest leaves it out (the spec's paranoid default)
    description: str = ""
    idempotent: bool | None = None
    retry_safe: bool | None = None
    input_schema: Mapping[str, Any] | None = None
    output_schema: Mapping[str, Any] | None = None
    values: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class FactOutput:
    command: str
    source: str
    fact_type: str
    compatibility_view: str = "mirror_object"


@dataclass(frozen=True)
class Manifest:
    name: str
    version: str
    protocol: int
    entrypoint: Path  # resolved (symlinks followed) when loaded: the file that is run
    declared_entrypoint: Path  # as the manifest names it, under `directory`
    directory: Path
    root: Path
    file: Path
    description: str
    concurrency_safe: bool
    commands: Mapping[str, CommandSpec]
    fact_outputs: tuple[FactOutput, ...]
    required_config: tuple[str, ...]
    optional_config: tuple[str, ...]
    max_subs: int
    fingerprint: str
    # Why the entrypoint cannot start on this machine (its shebang's interpreter is missing): the
    # registry skips an instance of it with this reason. None when it can start.
    cannot_run: str | None = None
    # JSON Schema for the instance's `config` (the registry checks it), kept as plain JSON: the
    # validation memo digests it, which a frozen mapping would defeat. Left out of eq and hash.
    config_schema: dict[str, Any] | None = field(default=None, compare=False)

    def fact_rule(self, command: str) -> FactOutput | None:
        return next((rule for rule in self.fact_outputs if rule.command == command), None)


class ManifestInvalid(Exception):
    def __init__(self, problems: list[ConfigProblem], name: str | None = None):
        self.problems = problems
        # The plugin name the manifest declares, when it declares one (to explain a configured
        # instance of it that cannot load).
        self.name = name
        super().__init__("; ".join(str(p) for p in problems))


@cache
def manifest_schema() -> dict[str, Any]:
    return json.loads(Path(__file__).with_name("manifest.schema.json").read_text(encoding="utf-8"))


def load_manifest(directory: Path, root: Path, warnings: list[ConfigProblem]) -> Manifest:
    """Read `directory/manifest.yaml`. Raises ManifestInvalid naming every reason; appends warnings."""
    file = directory / MANIFEST_FILE
    raw = file.read_bytes()
    try:
        doc = parse_yaml(raw.decode("utf-8"), file)
    except (ConfigError, UnicodeDecodeError) as exc:
        problems = list(exc.problems) if isinstance(exc, ConfigError) else [ConfigProblem(str(exc), file=file)]
        raise ManifestInvalid(problems) from exc
    data = doc.data
    if not isinstance(data, dict):
        raise ManifestInvalid([ConfigProblem("manifest must be a mapping", file=file, line=1)])
    declared = data.get("name") if isinstance(data.get("name"), str) else None
    coerce_yaml11_booleans(manifest_schema(), data, _deref)
    problems = _schema_problems(doc)
    warnings.extend(
        _at(doc, path, f"unknown manifest key {path[-1]!r} is ignored")
        for path in unknown_keys(manifest_schema(), data)
    )
    if problems:
        raise ManifestInvalid(problems, declared)
    commands = _commands(data["commands"])
    if isinstance(data["commands"], list):
        names = [item["name"] for item in data["commands"]]
        for index, name in enumerate(names):
            if name in names[:index]:
                # Why refuse: `type` decides the token scope, so two declarations must not race.
                problems.append(_at(doc, ("commands", index, "name"), f"command {name!r} is declared twice"))
    if data["protocol"] not in SUPPORTED_PROTOCOLS:
        problems.append(_at(doc, ("protocol",), f"protocol {data['protocol']} is not supported (this core speaks 2)"))
    fact_outputs = []
    for index, rule in enumerate(data.get("fact_outputs") or []):
        command = rule["when"]["command"]
        if command not in commands:
            problems.append(
                _at(
                    doc,
                    ("fact_outputs", index, "when", "command"),
                    f"fact_outputs names undeclared command {command!r}",
                )
            )
        fact_outputs.append(
            FactOutput(command, rule["from"], rule["fact_type"], rule.get("compatibility_view", "mirror_object"))
        )
    max_subs = (data.get("stopwatch") or {}).get("max_subs") or DEFAULT_MAX_SUBS
    entrypoint = _trusted_entrypoint(doc, directory, root, str(data["entrypoint"]), problems, warnings)
    if problems:
        raise ManifestInvalid(problems, declared)
    config_keys = data.get("config_keys") or {}
    return Manifest(
        name=data["name"],
        version=str(data["version"]),
        protocol=data["protocol"],
        entrypoint=entrypoint,
        declared_entrypoint=directory / str(data["entrypoint"]),
        directory=directory,
        root=root,
        file=file,
        description=data.get("description") or "",
        concurrency_safe=data.get("concurrency_safe", True),
        commands=MappingProxyType(commands),
        fact_outputs=tuple(fact_outputs),
        required_config=tuple(config_keys.get("required") or ()),
        optional_config=tuple(config_keys.get("optional") or ()),
        max_subs=max_subs,
        fingerprint=blake3.blake3(raw).hexdigest(),
        cannot_run=missing_interpreter(entrypoint, plugin_environment()["PATH"]),
        config_schema=data.get("config_schema"),
    )


def _commands(raw: Any) -> dict[str, CommandSpec]:
    # The spec's object format (5.4) names commands by their keys; the key is the name.
    items = raw if isinstance(raw, list) else [{**(spec or {}), "name": name} for name, spec in raw.items()]
    return {
        item["name"]: CommandSpec(
            name=item["name"],
            type=item.get("type", "write"),
            description=item.get("description") or "",
            idempotent=item.get("idempotent"),
            retry_safe=item.get("retry_safe"),
            input_schema=freeze(item.get("input_schema")),
            output_schema=freeze(item.get("output_schema")),
            values=freeze(item.get("values")),
        )
        for item in items
    }


def _trusted_entrypoint(
    doc: YamlDocument,
    directory: Path,
    root: Path,
    entrypoint: str,
    problems: list[ConfigProblem],
    warnings: list[ConfigProblem],
) -> Path:
    """Spec §5.5: inside an approved root, no `..`, executable, no world-writable plugin dir."""
    path = Path(entrypoint)
    if path.is_absolute() or ".." in path.parts:
        problems.append(_at(doc, ("entrypoint",), f"entrypoint {entrypoint!r} must be a relative path without '..'"))
        return directory / path.name
    resolved = (directory / path).resolve()
    real_root = root.resolve()
    if (directory / path).is_symlink():
        # Spec §5.9: symlinks are always warned, even where they are allowed.
        warnings.append(_at(doc, ("entrypoint",), f"entrypoint {entrypoint!r} is a symlink to {resolved}"))
    if not resolved.is_relative_to(real_root):
        problems.append(
            _at(doc, ("entrypoint",), f"entrypoint resolves to {resolved}, outside plugin root {real_root}")
        )
    elif not resolved.is_file():
        problems.append(_at(doc, ("entrypoint",), f"entrypoint {entrypoint!r} does not exist in {directory}"))
    elif not os.access(resolved, os.X_OK):
        problems.append(_at(doc, ("entrypoint",), f"entrypoint {entrypoint!r} is not executable (chmod +x it)"))
    mode = directory.stat().st_mode
    if mode & stat.S_IWOTH:
        problems.append(
            ConfigProblem(f"plugin directory {directory} is world-writable; refusing to load it", file=doc.file)
        )
    return resolved


def _schema_problems(doc: YamlDocument) -> list[ConfigProblem]:
    problems = []
    for error in schema_errors(manifest_schema(), doc.data):
        path, message = describe(error)
        if error.validator == "oneOf" and path == ("commands",):
            message = "commands must be a non-empty list of {name, type, ...} or a mapping of name to command"
            best = min(error.context or [], key=lambda e: len(list(e.absolute_path)) * -1, default=None)
            if best is not None and len(best.absolute_path) > 1:
                path, message = describe(best)
            elif named := [e for e in error.context or [] if e.validator == "pattern"]:
                # A mapping key refused by `propertyNames`: named at that key, not at `commands`.
                path, message = describe(named[0])
                path = (*path, named[0].instance)
        problems.append(_at(doc, path, message))
    return problems


def _deref(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return manifest_schema()["$defs"][ref.removeprefix("#/$defs/")]  # type: ignore[no-any-return]
    return schema


def _at(doc: YamlDocument, path: tuple[Any, ...], message: str) -> ConfigProblem:
    return ConfigProblem(message, file=doc.file, line=doc.line_of(path), key=dotted(path) or None)
