"""YAML files read with the line of every key, so errors can say `file:line key a.b.c`.

Read with the YAML 1.2 core schema, as the original's Go YAML library reads them, not PyYAML's
YAML 1.1 default: `on:` (the pipelines DSL's trigger key), `yes`, `no`, `off` and `y` stay strings,
`07:30` is not the sexagesimal number 450, `0420` is 420 and dates stay strings (plugin config
travels to plugins as JSON).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, ConfigProblem
from .integrity import digest

KeyPath = tuple[str | int, ...]

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with the YAML 1.2 core schema's implicit types (bool, int, float)."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:  # type: ignore[override]
        text = str(self.construct_scalar(node))
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _INT, _FLOAT, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
Yaml12Loader.add_implicit_resolver(_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
Yaml12Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
Yaml12Loader.add_constructor(_INT, Yaml12Loader.construct_yaml_int)


def plain_scalar_value(text: str) -> Any:
    """What `text` means when written unquoted in YAML: a bool, int or float, else `text` itself.

    Spec "Configuration Specification" §6 interpolates `${VAR}` before YAML parsing, so an
    unquoted `max_workers: ${N}` is a number; we interpolate parsed scalars and type them here.
    """
    try:
        value = yaml.load(text, Loader=Yaml12Loader)  # a SafeLoader subclass
    except yaml.YAMLError:
        return text
    return value if isinstance(value, bool | int | float) else text


_YAML11_BOOLEANS = {
    **dict.fromkeys(("yes", "Yes", "YES", "on", "On", "ON", "y", "Y"), True),
    **dict.fromkeys(("no", "No", "NO", "off", "Off", "OFF", "n", "N"), False),
}


def coerce_yaml11_booleans(
    schema: Mapping[str, Any], data: Any, deref: Callable[[Mapping[str, Any]], Mapping[str, Any]]
) -> None:
    """In place: `enabled: yes` where `schema` wants a boolean means true, as the original's YAML
    library reads YAML 1.1 words into boolean fields. Everywhere else they stay strings."""
    schema = deref(schema)
    for sub in schema.get("allOf", ()):
        coerce_yaml11_booleans(sub, data, deref)
    for option in schema.get("oneOf", ()):
        wanted = deref(option).get("type")
        if wanted == ("array" if isinstance(data, list) else "object" if isinstance(data, dict) else None):
            coerce_yaml11_booleans(option, data, deref)
    if isinstance(data, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in data.items():
            sub = props.get(key, extra if isinstance(extra, Mapping) else None)
            if sub is None:
                continue
            if deref(sub).get("type") == "boolean" and isinstance(value, str) and value in _YAML11_BOOLEANS:
                data[key] = _YAML11_BOOLEANS[value]
            else:
                coerce_yaml11_booleans(sub, value, deref)
    elif isinstance(data, list) and isinstance(schema.get("items"), Mapping):
        for item in data:
            coerce_yaml11_booleans(schema["items"], item, deref)


@dataclass
class YamlDocument:
    file: Path
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    # Paths of unquoted (plain) scalars holding `${`: their interpolated text is typed like YAML.
    plain: set[KeyPath] = field(default_factory=set)
    # BLAKE3 of the bytes parsed: what the integrity seal is checked against (integrity.py).
    digest: str | None = None

    def line_of(self, path: KeyPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


def load_yaml_file(path: Path) -> YamlDocument:
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except OSError as exc:
        raise ConfigError([ConfigProblem(f"cannot read file: {exc.strerror}", file=path)]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigProblem(f"file is not UTF-8 text: {exc.reason}", file=path)]) from exc
    doc = parse_yaml(text, path)
    doc.digest = digest(data)
    return doc


def parse_yaml(text: str, path: Path) -> YamlDocument:
    loader = Yaml12Loader(text)
    doc = YamlDocument(file=path, data=None)
    try:
        node = loader.get_single_node()
        if node is not None:
            # Before constructing: construction flattens `<<` merges into the nodes themselves.
            _record_lines(node, (), doc)
            doc.data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem(f"invalid YAML: {problem}", file=path, line=line)]) from exc
    finally:
        loader.dispose()
    return doc


def _record_lines(node: yaml.Node, path: KeyPath, doc: YamlDocument, depth: int = 0, merged: bool = False) -> None:
    """Lines (and plain `${` scalars) under `path`. `merged`: `node` is merged in by `<<:`, so keys
    the mapping itself (or an earlier merge source) already set are not ours."""
    if depth > 100:  # alias loops (`a: &a [*a]`) are legal YAML; their lines are not worth recursing for
        return
    if isinstance(node, yaml.MappingNode):
        merges = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            if key_node.tag == "tag:yaml.org,2002:merge":
                merges.append(value_node)
                continue
            child = (*path, key_node.value)
            if merged and child in doc.lines:
                continue
            doc.lines.setdefault(child, key_node.start_mark.line + 1)
            _record_lines(value_node, child, doc, depth + 1)
        # `<<: *anchor` keys: lines inside the anchor, after the mapping's own keys (which win).
        for value_node in merges:
            for source in value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]:
                _record_lines(source, path, doc, depth + 1, merged=True)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            doc.lines.setdefault(child, item.start_mark.line + 1)
            _record_lines(item, child, doc, depth + 1)
    elif isinstance(node, yaml.ScalarNode) and node.style is None and "${" in node.value:
        doc.plain.add(path)


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
