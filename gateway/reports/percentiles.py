"""Nearest-rank percentiles of durations, for the stopwatch endpoint and the live views."""

from __future__ import annotations

from collections.abc import Sequence

PERCENTILES = (50, 95, 99)


def nearest_rank(ordered: Sequence[int], percent: int) -> int:
    """The nearest-rank percentile: the smallest sample with at least `percent`% of the samples at
    or below it. Always a duration that happened, never an interpolation between two."""
    rank = -(-percent * len(ordered) // 100)  # ceil(percent/100 * n) in exact integers
    return ordered[rank - 1]


def summary(samples: Sequence[int]) -> dict[str, int | None]:
    ordered = sorted(samples)
    out: dict[str, int | None] = {f"p{p}": nearest_rank(ordered, p) if ordered else None for p in PERCENTILES}
    out["max"] = ordered[-1] if ordered else None
    return out
