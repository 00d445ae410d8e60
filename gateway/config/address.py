"""Naming a config key on the command line (Operator Handbook, "Entity addressing").

Dot paths with list positions (`plugins.echo.enabled`, `pipelines[0].steps[1].uses`) and the
entity form, which finds a named item wherever it sits: `plugin:echo.enabled`,
`pipeline:video-wisdom.timeout`, `webhook:github.path`; `plugin:*` lists the names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .yamlsrc import KeyPath, dotted

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_ENTITY = re.compile(r"^(plugin|pipeline|webhook):([^.\[]+)(.*)$")


class AddressError(ValueError):
    pass


@dataclass(frozen=True)
class Address:
    path: KeyPath
    wildcard: bool = False  # `plugin:*`: the names of the section at `path`
    text: str = ""


def parse_path(text: str) -> KeyPath:
    """`a.b[2].c` → ("a", "b", 2, "c")."""
    if not text:
        return ()
    parts: list[str | int] = []
    position = 0
    for match in _SEGMENT.finditer(text):
        gap = text[position : match.start()]
        if gap not in ("", ".") or (gap == "." and position == 0):
            raise AddressError(f"cannot read {text!r} as a key path near {text[position:]!r}")
        key, index = match.groups()
        parts.append(int(index) if index is not None else key)
        position = match.end()
    if position != len(text):
        raise AddressError(f"cannot read {text!r} as a key path near {text[position:]!r}")
    return tuple(parts)


def resolve(text: str, document: Mapping[str, Any]) -> Address:
    """The key path `text` names in the merged config `document`."""
    match = _ENTITY.match(text)
    if not match:
        return Address(parse_path(text), text=text)
    kind, name, rest = match.groups()
    if rest and not rest.startswith((".", "[")):
        raise AddressError(f"cannot read {text!r}: expected '.' after {kind}:{name}")
    tail = parse_path(rest.removeprefix("."))
    if kind == "plugin":
        base: KeyPath = ("plugins",)
        if name == "*":
            return Address(base, wildcard=True, text=text)
        if name not in (document.get("plugins") or {}):
            raise AddressError(f"no plugin {name!r} is configured")
        return Address((*base, name, *tail), text=text)
    base = ("pipelines",) if kind == "pipeline" else ("webhooks", "endpoints")
    items = document.get("pipelines") if kind == "pipeline" else (document.get("webhooks") or {}).get("endpoints")
    if name == "*":
        return Address(base, wildcard=True, text=text)
    for index, item in enumerate(items or []):
        if isinstance(item, Mapping) and item.get("name") == name:
            return Address((*base, index, *tail), text=text)
    raise AddressError(f"no {kind} named {name!r} is configured")


def lookup(document: Any, path: KeyPath) -> Any:
    """The value at `path`; KeyError naming the first missing part."""
    node = document
    for depth, part in enumerate(path):
        found = (isinstance(node, Mapping) and part in node) or (
            isinstance(node, list | tuple) and isinstance(part, int) and 0 <= part < len(node)
        )
        if not found:
            raise KeyError(dotted(path[: depth + 1]))
        node = node[part]
    return node


def names(document: Any, path: KeyPath) -> list[str]:
    """The names under a section: plugin keys, or the `name` of each pipeline or endpoint."""
    try:
        section = lookup(document, path)
    except KeyError:
        return []
    if isinstance(section, Mapping):
        return [str(k) for k in section]
    return [str(item.get("name")) for item in section if isinstance(item, Mapping)]
