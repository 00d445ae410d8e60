"""YAML files read with the line of every key, so errors can say `file:line key a.b.c`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, ConfigProblem

KeyPath = tuple[str | int, ...]


@dataclass
class YamlDocument:
    file: Path
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line_of(self, path: KeyPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


def load_yaml_file(path: Path) -> YamlDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigProblem(f"cannot read file: {exc.strerror}", file=path)]) from exc
    return parse_yaml(text, path)


def parse_yaml(text: str, path: Path) -> YamlDocument:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem(f"invalid YAML: {problem}", file=path, line=line)]) from exc
    finally:
        loader.dispose()
    doc = YamlDocument(file=path, data=data)
    if node is not None:
        _record_lines(node, (), doc.lines)
    return doc


def _record_lines(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                continue
            child = (*path, key_node.value)
            lines.setdefault(child, key_node.start_mark.line + 1)
            _record_lines(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines.setdefault(child, item.start_mark.line + 1)
            _record_lines(item, child, lines)


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
