"""Durations as the spec writes them: `30s`, `5m`, `1h30m`, `24h`, `30d`, `2w`, `500ms`."""

from __future__ import annotations

import re

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: object) -> float:
    """Seconds in `value`; a bare number is seconds. Raises ValueError naming what was wrong."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 30s or 5m, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"duration must not be negative, got {value!r}")
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a duration such as 30s or 5m, got {value!r}")
    text = value.strip().lower()
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"expected a duration such as 30s, 5m, 1h30m, 24h, 30d or 2w, got {value!r}")
    return total


def format_duration(seconds: float) -> str:
    """The shortest spec-style spelling of `seconds` (used in messages and config views)."""
    if seconds and seconds < 1:
        return f"{round(seconds * 1000)}ms"
    remaining = round(seconds)
    if remaining == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
