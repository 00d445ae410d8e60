"""Baggage: explicit durable context claimed by `uses` steps (DSL reference §3.8, spec 001 §3.2).
Pure.

Claims are evaluated against the step's immediate event payload and its inherited context, then
deep-accreted into a new context: new paths may be added and an inherited value repeated, but an
inherited path is never rewritten.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.paths import MISSING, resolve, split_path

_KEY_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SOURCE_ROOTS = ("payload", "context")


class BaggageError(ValueError):
    pass


@dataclass(frozen=True)
class BaggageSpec:
    claims: tuple[tuple[str, str], ...] = ()  # (durable dotted key, source expression)
    bulk_from: str | None = None
    namespace: str | None = None

    @property
    def empty(self) -> bool:
        return not self.claims and self.bulk_from is None


def parse(raw: Any, *, where: str = "baggage") -> BaggageSpec:
    """Validate a step's `baggage:` mapping (load time)."""
    if raw is None:
        return BaggageSpec()
    if not isinstance(raw, Mapping):
        raise BaggageError(f"{where}: must be a mapping of durable keys to payload.* or context.* paths")
    bulk_from, namespace = raw.get("from"), raw.get("namespace")
    if ("namespace" in raw) and "from" not in raw:
        raise BaggageError(f"{where}.namespace: only valid with `from`")
    if "from" in raw:
        if not isinstance(bulk_from, str) or split_path(bulk_from, ("payload",)) is None:
            raise BaggageError(f"{where}.from: {bulk_from!r} must be payload or payload.<path>")
        if not isinstance(namespace, str) or not namespace:
            raise BaggageError(f"{where}.namespace: bulk import needs a namespace (it is not placed at the root)")
        check_key(namespace, f"{where}.namespace")
    claims = []
    for key, source in raw.items():
        if key in ("from", "namespace"):
            continue
        check_key(str(key), f"{where}.{key}")
        if not isinstance(source, str) or split_path(source, SOURCE_ROOTS) is None:
            raise BaggageError(f"{where}.{key}: {source!r} must be a payload.* or context.* path")
        claims.append((str(key), source.strip()))
    return BaggageSpec(tuple(claims), bulk_from.strip() if isinstance(bulk_from, str) else None, namespace)


def check_key(key: str, where: str) -> None:
    parts = key.split(".")
    for part in parts:
        if not _KEY_SEGMENT.match(part):
            raise BaggageError(
                f"{where}: {key!r} must be a dotted path of letters, digits and underscores, "
                "with non-empty segments that do not start with a digit"
            )


def accrete(inherited: Mapping[str, Any], spec: BaggageSpec, scope: Mapping[str, Any]) -> dict[str, Any]:
    """The new durable context: `inherited` plus this step's claims. Raises BaggageError for a
    missing source or an attempt to rewrite an inherited path."""
    context = copy.deepcopy(dict(inherited))
    for key, source in spec.claims:
        value = resolve(scope, source)
        if value is MISSING:
            raise BaggageError(f"baggage {key}: source {source} is missing (claims are never skipped)")
        _put(context, key.split("."), value, key)
    if spec.bulk_from is not None and spec.namespace is not None:
        value = resolve(scope, spec.bulk_from)
        if value is MISSING:
            raise BaggageError(f"baggage from: {spec.bulk_from} is missing")
        if not isinstance(value, Mapping):
            raise BaggageError(f"baggage from: {spec.bulk_from} is not an object")
        for inner_key, inner_value in value.items():
            _put(context, [*spec.namespace.split("."), str(inner_key)], inner_value, f"{spec.namespace}.{inner_key}")
    return context


def _put(context: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    node = context
    for index, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise BaggageError(f"baggage {key}: {'.'.join(parts[: index + 1])} is already a value, not an object")
        node = child
    last = parts[-1]
    if last not in node:
        node[last] = copy.deepcopy(value)
        return
    existing = node[last]
    if isinstance(existing, dict) and isinstance(value, Mapping):
        for inner_key, inner_value in value.items():  # deep accretion: add beside, never over
            _put(existing, [str(inner_key)], inner_value, f"{key}.{inner_key}")
    elif not _equal(existing, value):
        raise BaggageError(f"baggage {key}: inherited value {existing!r} cannot be rewritten to {value!r}")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return (type(a) is type(b) and a == b) or (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )
