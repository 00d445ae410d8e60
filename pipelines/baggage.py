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

_KEY_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SOURCE_ROOTS = ("payload", "context")


class BaggageError(ValueError):
    """`path` is the offending key relative to the `baggage:` mapping (`("web.url",)`, `("from",)`),
    empty for runtime failures; `message` is the text without the `where` prefix."""

    def __init__(self, message: str, *, where: str = "", path: tuple[str, ...] = ()):
        super().__init__(f"{where}: {message}" if where else message)
        self.message, self.path = message, path


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
        raise BaggageError("must be a mapping of durable keys to payload.* or context.* paths", where=where)
    bulk_from, namespace = raw.get("from"), raw.get("namespace")
    if "namespace" in raw and "from" not in raw:
        raise BaggageError("only valid with `from`", where=f"{where}.namespace", path=("namespace",))
    if "from" in raw:
        if not isinstance(bulk_from, str) or split_path(bulk_from, ("payload",)) is None:
            message = f"{bulk_from!r} must be payload or payload.<path>"
            raise BaggageError(message, where=f"{where}.from", path=("from",))
        if not isinstance(namespace, str) or not namespace:
            raise BaggageError(
                "bulk import needs a namespace (it is not placed at the root)",
                where=f"{where}.namespace",
                path=("namespace",),
            )
        check_key(namespace, f"{where}.namespace", ("namespace",))
    claims = []
    for key, source in raw.items():
        if key in ("from", "namespace"):
            continue
        check_key(str(key), f"{where}.{key}", (str(key),))
        if not isinstance(source, str) or split_path(source, SOURCE_ROOTS) is None:
            raise BaggageError(
                f"{source!r} must be a payload.* or context.* path", where=f"{where}.{key}", path=(str(key),)
            )
        claims.append((str(key), source.strip()))
    return BaggageSpec(tuple(claims), bulk_from.strip() if isinstance(bulk_from, str) else None, namespace)


RESERVED = "ductile"


def check_key(key: str, where: str, path: tuple[str, ...] = ()) -> None:
    if key.split(".")[0] == RESERVED:
        raise BaggageError(
            f"{key!r}: the {RESERVED}.* namespace is reserved for the core's control fields "
            "(pipeline, step, route_depth, pipeline_instance_id)",
            where=where,
            path=path,
        )
    for part in key.split("."):
        if not _KEY_SEGMENT.fullmatch(part):
            raise BaggageError(
                f"{key!r} must be a dotted path of letters, digits and underscores, "
                "with non-empty segments that do not start with a digit",
                where=where,
                path=path,
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
        if part not in node:  # an inherited null is a value like any other: never replaced by an object
            node[part] = {}
        child = node[part]
        if not isinstance(child, dict):
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
    """JSON equality without coercion (true is not 1, also inside lists); 1 equals 1.0."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return (type(a) is type(b) and a == b) or (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )
