"""Dotted paths into the scope a pipeline sees: `payload.*`, `context.*`, `config.*`. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

ROOTS = ("payload", "context", "config")
_INDEX = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() accepts "²", which int() refuses


class Missing:
    """A path that resolves to nothing (distinct from a JSON null)."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = Missing()


def split_path(path: str, roots: tuple[str, ...] = ROOTS) -> list[str] | None:
    """The segments of `path` if it is `root` or `root.a.b` with a known root, else None."""
    if not isinstance(path, str):
        return None
    parts = path.strip().split(".")
    if parts[0] not in roots or any(not p for p in parts):
        return None
    return parts


def resolve(scope: Mapping[str, Any], path: str) -> Any:
    """The value at `path` in `scope` ({"payload": ..., "context": ..., "config": ...}), or MISSING.
    Numeric segments index lists."""
    parts = path.strip().split(".")
    value: Any = scope
    for part in parts:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and _INDEX.fullmatch(part) and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value
