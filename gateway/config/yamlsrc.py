"""YAML files read with the line of every key, so errors can say `file:line key a.b.c`.

Read with the YAML 1.2 core schema, as the original's Go YAML library reads them, not PyYAML's
YAML 1.1 default: `on:` (the pipelines DSL's trigger key), `yes`, `no`, `off` and `y` stay strings,
`07:30` is not the sexagesimal number 450, `0420` is 420 and dates stay strings (plugin config
travels to plugins as JSON).

Bounded (issue 12: an alias bomb took 102 s and 6.6 GB to reject, a 4.4 MB config 37 s to
check): a file over MAX_FILE_BYTES is refused unread, and a document whose aliases would expand
it past MAX_NODES values, or that refers to itself, is refused before anything is built from it.
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

# One config or manifest file. Hand- or agent-written configs of a few thousand plugins stay far
# below; a bigger tree is split with `include:` (the bound is per file).
MAX_FILE_BYTES = 1 << 20
# Values of one document with every alias expanded (a plain 1 MiB file holds at most ~260,000):
# what the loader, the schema and every consumer would walk.
MAX_NODES = 250_000

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


def _construct_yaml12_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _yaml12(loader: Any) -> Any:
    """`loader` (a class) with the YAML 1.2 core schema's implicit types (bool, int, float)."""
    loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _INT, _FLOAT, _TIMESTAMP)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    loader.add_implicit_resolver(_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
    loader.add_implicit_resolver(
        _FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )
    loader.add_constructor(_INT, _construct_yaml12_int)
    return loader


@_yaml12
class Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with the YAML 1.2 core schema's implicit types (bool, int, float)."""


@_yaml12
class _FastYaml12Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same, parsing with libyaml where PyYAML has it (about ten times faster than the pure
    Python parser, which was most of checking a config of hundreds of plugins). Its plain scalars
    have style "" where the Python parser's have None."""


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
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError([ConfigProblem(too_big(size), file=path)])
        data = path.read_bytes()
        text = data.decode("utf-8")
    except OSError as exc:
        raise ConfigError([ConfigProblem(f"cannot read file: {exc.strerror}", file=path)]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigProblem(f"file is not UTF-8 text: {exc.reason}", file=path)]) from exc
    doc = parse_yaml(text, path)
    doc.digest = digest(data)
    return doc


def too_big(size: int) -> str:
    return (
        f"file is {size / (1 << 20):.1f} MiB, over the {MAX_FILE_BYTES >> 20} MiB a config file may be; "
        "split it into files listed under include:"
    )


def parse_yaml(text: str, path: Path) -> YamlDocument:
    if len(text) > MAX_FILE_BYTES:  # text not read from a file: `config set`'s proposed edit
        raise ConfigError([ConfigProblem(too_big(len(text.encode())), file=path)])
    loader = _FastYaml12Loader(text)
    doc = YamlDocument(file=path, data=None)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node, path)
            # Before constructing: construction flattens `<<` merges into the nodes themselves.
            _record_lines(node, (), doc)
            doc.data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem(f"invalid YAML: {problem}", file=path, line=line)]) from exc
    except RecursionError as exc:  # the pure Python parser, on deep nesting (libyaml stops at 1,000 levels)
        raise ConfigError([ConfigProblem("invalid YAML: nested too deeply", file=path)]) from exc
    finally:
        loader.dispose()
    return doc


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: yaml.Node, path: Path) -> None:
    """Refuse a document whose aliases expand it past MAX_NODES values, or that contains itself,
    before anything is built from it. An alias is the very node it names, so the document is a
    graph: the expanded size of each node is counted once (iteratively: no recursion limit) and
    reused for every alias of it. Linear in the document as written."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose subtree is being counted
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        key = id(node)
        if counted:
            open_.discard(key)
            sizes[key] = size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > MAX_NODES:
                raise ConfigError(
                    [
                        ConfigProblem(
                            f"YAML aliases expand this value to more than {MAX_NODES:,} values (an alias bomb?); "
                            "refused before expanding it",
                            file=path,
                            line=node.start_mark.line + 1,
                        )
                    ]
                )
            continue
        if key in sizes:
            continue
        if key in open_:  # reached again from inside itself
            raise ConfigError(
                [
                    ConfigProblem(
                        "a YAML alias refers to a value that contains it (a recursive structure), "
                        "which a config cannot hold",
                        file=path,
                        line=node.start_mark.line + 1,
                    )
                ]
            )
        open_.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


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
    elif isinstance(node, yaml.ScalarNode) and not node.style and "${" in node.value:
        doc.plain.add(path)


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
