"""What the ledger can store, one rule with the same answer on SQLite and PostgreSQL.

PostgreSQL refuses NUL in text and in JSON, and unpaired surrogates (`"\\udc00"`, which JSON can
carry and Python decodes as a lone surrogate) in JSON, even as a query's parameters; SQLite
stores both. Values nested deeper than MAX_DEPTH are refused too: the JSON encoder and every
walker after it recurse, and no real payload needs that depth. Every ingress checks what it
accepts here first, so a sender gets a 400 that says where, never a 500 that it retries for ever.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 256
NOT_STORABLE = "must not contain NUL characters or unpaired surrogates"
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")


class Unstorable(ValueError):
    """A value the ledger cannot hold; the message names where in it (`payload.a[2].b`)."""


def storable_text(text: str) -> bool:
    return _BAD_TEXT.search(text) is None


def check_storable(value: Any, what: str = "value") -> None:
    """Raise Unstorable naming the first string the ledger cannot hold, or the first container
    nested past MAX_DEPTH. Iterative: a hostile value cannot exhaust the stack here."""
    stack: list[tuple[Any, str, int]] = [(value, what, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, str):
            if not storable_text(node):
                raise Unstorable(f"{path}: strings {NOT_STORABLE}")
        elif isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                raise Unstorable(f"{what} nests deeper than {MAX_DEPTH} levels")
            if isinstance(node, dict):
                for key, child in node.items():
                    if isinstance(key, str) and not storable_text(key):
                        raise Unstorable(f"{path}: keys {NOT_STORABLE}")
                    stack.append((child, f"{path}.{key}", depth + 1))
            else:
                stack.extend((child, f"{path}[{index}]", depth + 1) for index, child in enumerate(node))


def loads(text: str | bytes, what: str = "body") -> Any:
    """JSON as the ledger will keep it: NaN and Infinity refused (they are not JSON, and neither
    jsonb nor SQLite's JSON takes them), nesting bounded, every string storable. ValueError
    (JSONDecodeError included) for text that is not JSON, Unstorable for what cannot be kept."""
    try:
        value = json.loads(text, parse_constant=not_json)
    except RecursionError:
        raise Unstorable(f"{what} nests deeper than {MAX_DEPTH} levels") from None
    check_storable(value, what)
    return value


def not_json(constant: str) -> Any:
    """`parse_constant` of a JSON decoder: Python's json reads NaN and Infinity; JSON has neither,
    and the jsonb and SQLite JSON columns the ledger keeps a document in refuse them."""
    raise ValueError(f"{constant} is not JSON")
