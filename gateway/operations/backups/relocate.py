"""Path keys of a restored config, pointed at what they should read in their new place.

A config names files by path (`state.path`, `plugin_roots`, `include`, `environment_vars.include`),
relative to the declaring file or absolute. After a restore each must resolve to the restored copy
when the archive holds one (the database, the config's own files, plugin roots at scope plugins,
env files at scope all), and otherwise to the original it named, which is still where it was.
Only keys that would resolve wrongly are rewritten, and only their values: the text of each value
is replaced where it stands, so every other byte of the file (comments, spacing, order) stays.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The loader's own path rules, so a path is resolved here exactly as the restored gateway will.
from gateway.config.loader import PATH_LISTS, PATH_SCALARS, dig, resolve_path
from gateway.config.yamlsrc import KeyPath, Yaml12Loader, dotted


@dataclass(frozen=True)
class Rewrite:
    file: Path
    path: KeyPath
    old: str
    new: str

    @property
    def key(self) -> str:
        return dotted(self.path)


@dataclass(frozen=True)
class ConfigFile:
    final: Path  # where it will live after the restore
    original: Path  # where it lived when it was backed up
    text: str


def plan_rewrites(
    files: Sequence[ConfigFile], target_of: Callable[[KeyPath, Path], Path], restore_root: Path
) -> list[Rewrite]:
    """Every path key that must change. `target_of(key, original_target)` says what a key should
    point at after the restore."""
    rewrites = []
    for file in files:
        try:
            data = yaml.load(file.text, Loader=Yaml12Loader)  # a SafeLoader subclass
        except yaml.YAMLError:
            continue  # the restored gateway reports the file itself; nothing to point anywhere
        for path, value in _path_values(data):
            wanted = target_of(path, Path(resolve_path(file.original.parent, value)))
            if Path(resolve_path(file.final.parent, value)) == wanted:
                continue
            inside = wanted == restore_root or restore_root in wanted.parents
            new = os.path.relpath(wanted, file.final.parent) if inside else str(wanted)
            rewrites.append(Rewrite(file.final, path, value, new))
    return rewrites


def apply_rewrites(text: str, rewrites: Sequence[Rewrite]) -> str:
    root = yaml.compose(text, Loader=Yaml12Loader)
    spans = []
    for rewrite in rewrites:
        node = _node_at(root, rewrite.path)
        if not isinstance(node, yaml.ScalarNode):
            raise ValueError(f"{rewrite.file}: {rewrite.key} not found to rewrite")
        spans.append((node.start_mark.index, node.end_mark.index, _scalar(rewrite.new, node.style)))
    for start, end, new in sorted(spans, reverse=True):  # from the end: earlier offsets stay valid
        text = text[:start] + new + text[end:]
    return text


_PLAIN = re.compile(r"[\w./~-]+")


def _scalar(value: str, style: str | None) -> str:
    """`value` as YAML: plain when it was plain and reads back as itself, else double-quoted."""
    if style is None and _PLAIN.fullmatch(value) and yaml.load(value, Loader=Yaml12Loader) == value:
        return value
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def _node_at(node: yaml.Node | None, path: KeyPath) -> yaml.Node | None:
    for part in path:
        if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        elif isinstance(node, yaml.MappingNode):
            node = _value_of(node, str(part))
        else:
            return None
    return node


def _value_of(mapping: yaml.MappingNode, key: str) -> yaml.Node | None:
    merged: list[yaml.Node] = []
    for key_node, value_node in mapping.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            merged += value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        elif isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value_node
    # `<<: *anchor`: the key is the anchor's, so the anchor's text is what changes.
    for source in merged:
        if isinstance(source, yaml.MappingNode) and (found := _value_of(source, key)) is not None:
            return found
    return None


def _path_values(data: Any) -> list[tuple[KeyPath, str]]:
    found: list[tuple[KeyPath, str]] = []
    if not isinstance(data, dict):
        return found
    for path in PATH_LISTS:
        values = dig(data, path)
        if isinstance(values, list):
            found += [((*path, i), v) for i, v in enumerate(values) if isinstance(v, str)]
    for path in PATH_SCALARS:
        value = dig(data, path)
        if isinstance(value, str):
            found.append((path, value))
    return found
