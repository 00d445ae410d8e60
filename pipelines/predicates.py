"""The `if:` predicate engine shared by pipeline-level and step-level conditions. Pure.

DSL reference §3.6: exactly one of an atomic `path/op/value`, `all`, `any` or `not`; strict typing
(no string-to-number coercion); a missing path is absent for `exists` and compares as null
otherwise; invalid conditions fail at load time with the path of the offending node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pipelines.paths import MISSING, ROOTS, resolve, split_path

OPERATORS = ("exists", "eq", "neq", "in", "gt", "gte", "lt", "lte", "contains", "startswith", "endswith", "regex")
NUMERIC = ("gt", "gte", "lt", "lte")
STRING = ("contains", "startswith", "endswith", "regex")
MAX_DEPTH = 8
MAX_NODES = 64


class InvalidCondition(ValueError):
    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}" if where else message)
        self.where, self.message = where, message


def validate(condition: Any, *, roots: tuple[str, ...] = ROOTS, where: str = "if") -> None:
    """Raise InvalidCondition naming the offending node (e.g. `if.all[1].op`)."""
    counter = [0]
    _validate(condition, roots, where, 0, counter)


def _validate(node: Any, roots: tuple[str, ...], where: str, depth: int, counter: list[int]) -> None:
    counter[0] += 1
    if counter[0] > MAX_NODES:
        raise InvalidCondition(where, f"condition has more than {MAX_NODES} nodes")
    if depth > MAX_DEPTH:
        raise InvalidCondition(where, f"condition nests deeper than {MAX_DEPTH}")
    if not isinstance(node, Mapping):
        raise InvalidCondition(where, "a condition must be a mapping")
    kinds = [k for k in ("path", "all", "any", "not") if k in node]
    if len(kinds) != 1:
        raise InvalidCondition(where, "must be exactly one of an atomic path/op/value, all, any or not")
    kind = kinds[0]
    if kind in ("all", "any"):
        _only(node, {kind}, where)
        items = node[kind]
        if not isinstance(items, list) or not items:
            raise InvalidCondition(f"{where}.{kind}", "must be a non-empty list of conditions")
        for index, item in enumerate(items):
            _validate(item, roots, f"{where}.{kind}[{index}]", depth + 1, counter)
        return
    if kind == "not":
        _only(node, {"not"}, where)
        _validate(node["not"], roots, f"{where}.not", depth + 1, counter)
        return
    _only(node, {"path", "op", "value"}, where)
    path, op = node.get("path"), node.get("op")
    if not isinstance(path, str) or split_path(path, roots) is None:
        raise InvalidCondition(f"{where}.path", f"{path!r} must start with one of {', '.join(roots)}")
    if op not in OPERATORS:
        raise InvalidCondition(f"{where}.op", f"unknown operator {op!r}; use one of {', '.join(OPERATORS)}")
    if op == "exists":
        if "value" in node:
            raise InvalidCondition(f"{where}.value", "exists takes no value")
        return
    if "value" not in node:
        raise InvalidCondition(f"{where}.value", f"{op} needs a value")
    value = node["value"]
    if op in NUMERIC and not _is_number(value):
        raise InvalidCondition(f"{where}.value", f"{op} needs a number, got {value!r}")
    if op in STRING and not isinstance(value, str):
        raise InvalidCondition(f"{where}.value", f"{op} needs a string, got {value!r}")
    if op == "in" and not isinstance(value, list):
        raise InvalidCondition(f"{where}.value", f"in needs a list, got {value!r}")
    if op == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            raise InvalidCondition(f"{where}.value", f"invalid regex: {exc}") from exc


def _only(node: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(node) - allowed)
    if extra:
        raise InvalidCondition(where, f"unexpected keys {', '.join(extra)}")


def references_root(condition: Any, root: str) -> bool:
    if not isinstance(condition, Mapping):
        return False
    if "path" in condition:
        return str(condition["path"]).split(".")[0] == root
    children = condition.get("all") or condition.get("any") or ([condition["not"]] if "not" in condition else [])
    return any(references_root(c, root) for c in children)


def evaluate(condition: Mapping[str, Any], scope: Mapping[str, Any]) -> bool:
    """Evaluate a validated condition against {"payload": ..., "context": ..., "config": ...}."""
    if "all" in condition:
        return all(evaluate(c, scope) for c in condition["all"])
    if "any" in condition:
        return any(evaluate(c, scope) for c in condition["any"])
    if "not" in condition:
        return not evaluate(condition["not"], scope)
    actual = resolve(scope, condition["path"])
    op = condition["op"]
    if op == "exists":
        return actual is not MISSING
    if actual is MISSING:
        actual = None
    expected: Any = condition.get("value")
    if op == "eq":
        return _same(actual, expected)
    if op == "neq":
        return not _same(actual, expected)
    if op == "in":
        return any(_same(actual, item) for item in expected)
    if op in NUMERIC:
        if not _is_number(actual):
            return False
        return {"gt": actual > expected, "gte": actual >= expected, "lt": actual < expected, "lte": actual <= expected}[
            op
        ]
    if not isinstance(actual, str):
        return False
    if op == "regex":
        return re.fullmatch(expected, actual) is not None
    haystack, needle = actual.casefold(), expected.casefold()
    if op == "contains":
        return needle in haystack
    if op == "startswith":
        return haystack.startswith(needle)
    return haystack.endswith(needle)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: Any, b: Any) -> bool:
    """JSON equality without coercion: 1 is not "1", true is not 1, 1 equals 1.0."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)
