"""Changing one key of a config file as an operator would by hand: the rest of the file, its
comments, key order and indentation, stays as it was (ruamel.yaml's round trip). Pure text in,
text out; `gateway.operations.config_changes` decides which file and validates before anything is written.
"""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from .yamlsrc import KeyPath, dotted


class EditError(ValueError):
    pass


def _round_trip(text: str) -> tuple[YAML, Any]:
    # ruamel guesses the sequence layout (`- x` or `  - x` under its key) but re-indents every
    # mapping with one width, so that width is read off the file too.
    _, sequence_indent, dash_offset = load_yaml_guess_indent(text)
    yaml = YAML()  # round-trip mode, YAML 1.2 like our loader
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap an operator's long line
    yaml.indent(mapping=_mapping_indent(text), sequence=sequence_indent or 2, offset=dash_offset or 0)
    return yaml, yaml.load(text)


def _mapping_indent(text: str) -> int:
    """How far the file indents a nested mapping's keys (2 when it has none)."""
    parent: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if parent is not None and indent > parent and not stripped.startswith("- "):
            return indent - parent
        opens_mapping = stripped.endswith(":") and not stripped.startswith("- ")
        parent = indent if opens_mapping else None
    return 2


def set_value(text: str, path: KeyPath, value: Any) -> str:
    """`text` with the key at `path` set to `value`, creating missing mappings on the way.
    A list position may name an existing item or the end of the list (append)."""
    if not path:
        raise EditError("name a key to set")
    yaml, doc = _round_trip(text)
    if doc is None:
        doc = CommentedMap()
    node = doc
    for depth, part in enumerate(path[:-1]):
        node = _child(node, part, path[: depth + 1], creating=path[depth + 1])
    _assign(node, path[-1], value, path)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def delete_value(text: str, path: KeyPath) -> str:
    """`text` without the key or list item at `path` (its comments and the rest kept)."""
    if not path:
        raise EditError("name a key to delete")
    yaml, doc = _round_trip(text)
    node = doc
    for depth, part in enumerate(path[:-1]):
        node = _child(node, part, path[: depth + 1], creating=path[depth + 1])
    last = path[-1]
    present = isinstance(node, list) and isinstance(last, int) and 0 <= last < len(node)
    present = present or (isinstance(node, dict) and not isinstance(last, int) and last in node)
    if not present:
        raise EditError(f"{dotted(path)}: no such key")
    del node[last]
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _child(node: Any, part: str | int, where: KeyPath, *, creating: str | int) -> Any:
    if isinstance(node, list):
        if not isinstance(part, int) or not 0 <= part < len(node):
            raise EditError(f"{dotted(where)}: no such list item (the list has {len(node)})")
        child = node[part]
    elif isinstance(node, dict):
        if isinstance(part, int):
            raise EditError(f"{dotted(where)}: {dotted(where[:-1]) or 'the file'} is a mapping, not a list")
        child = node.get(part)
        if child is None:
            child = CommentedSeq() if isinstance(creating, int) else CommentedMap()
            node[part] = child
    else:
        raise EditError(f"{dotted(where)}: {dotted(where[:-1])} is a {type(node).__name__}, not a mapping or list")
    if not isinstance(child, dict | list):
        raise EditError(f"{dotted(where)} is a {type(child).__name__}, not a mapping or list")
    return child


def _assign(node: Any, part: str | int, value: Any, path: KeyPath) -> None:
    if isinstance(node, list):
        if not isinstance(part, int) or not 0 <= part <= len(node):
            raise EditError(f"{dotted(path)}: no such list item (the list has {len(node)}; {len(node)} appends)")
        if part == len(node):
            _add_last(node, part, value)
        else:
            node[part] = value
    elif isinstance(part, int):
        raise EditError(f"{dotted(path)}: {dotted(path[:-1])} is a mapping, not a list")
    elif part in node:
        node[part] = value
    else:
        _add_last(node, part, value)


# Where ruamel keeps the text after an entry's line: the post-value slot of a mapping key, the
# post-item slot of a list item.
_TRAILER_SLOT = {CommentedMap: 2, CommentedSeq: 0}


def _add_last(node: Any, part: str | int, value: Any) -> None:
    """Add a new last entry. ruamel keeps the blank lines and comments that follow a collection
    (often the heading of the next section) on its last entry, so a plain append put the new entry
    after them: below the blank line, stuck to the next section. They move below the new entry."""
    previous = (list(node)[-1] if isinstance(node, dict) else len(node) - 1) if len(node) else None
    if isinstance(node, list):
        node.append(value)
    else:
        node[part] = value
    if previous is None or isinstance(value, dict | list) or type(node) not in _TRAILER_SLOT:
        return
    trailer = _take_trailer(node, previous)
    if trailer:
        slots: list[Any] = [None, None, None, None]
        slots[_TRAILER_SLOT[type(node)]] = CommentToken(trailer, CommentMark(0), None)
        node.ca.items[part] = slots


def _take_trailer(node: Any, key: str | int) -> str | None:
    """Remove and return what follows the line of `node[key]` (or of its last descendant): its
    blank lines and comments, not a comment on the line itself."""
    value = node[key]
    if type(value) in _TRAILER_SLOT and len(value):
        return _take_trailer(value, list(value)[-1] if isinstance(value, dict) else len(value) - 1)
    slots = node.ca.items.get(key) if type(node) in _TRAILER_SLOT else None
    token = slots[_TRAILER_SLOT[type(node)]] if slots else None
    if not isinstance(token, CommentToken):
        return None
    line, newline, rest = token.value.partition("\n")
    if not rest:
        return None
    token.value = line + newline
    return newline + rest  # the new entry's own line ends first
