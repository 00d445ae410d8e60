"""The `if:` predicate engine shared by pipeline-level and step-level conditions. Pure.

DSL reference §3.6: exactly one of an atomic `path/op/value`, `all`, `any` or `not`; strict typing
(no string-to-number coercion); a missing path is absent for `exists` and compares as null
otherwise; invalid conditions fail at load time with the path of the offending node.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache, lru_cache
from typing import Any

from pipelines.paths import MISSING, ROOTS, resolve, split_path

OPERATORS = ("exists", "eq", "neq", "in", "gt", "gte", "lt", "lte", "contains", "startswith", "endswith", "regex")
NUMERIC = ("gt", "gte", "lt", "lte")
STRING = ("contains", "startswith", "endswith", "regex")
MAX_DEPTH = 8
MAX_NODES = 64


NodePath = tuple[str | int, ...]


class InvalidCondition(ValueError):
    """`where` names the offending node as text (`if.all[1].op`); `path` is the same node relative
    to the condition's root (`("all", 1, "op")`), for callers that report config key paths."""

    def __init__(self, where: str, message: str, path: NodePath = ()):
        super().__init__(f"{where}: {message}" if where else message)
        self.where, self.message, self.path = where, message, path


def validate(condition: Any, *, roots: tuple[str, ...] = ROOTS, where: str = "if") -> None:
    """Raise InvalidCondition naming the offending node (e.g. `if.all[1].op`)."""
    _Validator(roots, where).node(condition, (), 0)


class _Validator:
    def __init__(self, roots: tuple[str, ...], where: str):
        self.roots, self.where, self.count = roots, where, 0

    def fail(self, path: NodePath, message: str) -> InvalidCondition:
        text = self.where
        for part in path:
            text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
        return InvalidCondition(text, message, path)

    def node(self, node: Any, path: NodePath, depth: int) -> None:
        self.count += 1
        if self.count > MAX_NODES:
            raise self.fail(path, f"condition has more than {MAX_NODES} nodes")
        if depth > MAX_DEPTH:
            raise self.fail(path, f"condition nests deeper than {MAX_DEPTH}")
        if not isinstance(node, Mapping):
            raise self.fail(path, "a condition must be a mapping")
        kinds = [k for k in ("path", "all", "any", "not") if k in node]
        if len(kinds) != 1:
            found = f" (found {', '.join(kinds)})" if kinds else ""
            raise self.fail(path, f"must be exactly one of an atomic path/op/value, all, any or not{found}")
        kind = kinds[0]
        if kind in ("all", "any"):
            self.only(node, {kind}, path)
            items = node[kind]
            if not isinstance(items, list) or not items:
                raise self.fail((*path, kind), "must be a non-empty list of conditions")
            for index, item in enumerate(items):
                self.node(item, (*path, kind, index), depth + 1)
            return
        if kind == "not":
            self.only(node, {"not"}, path)
            self.node(node["not"], (*path, "not"), depth + 1)
            return
        self.atomic(node, path)

    def atomic(self, node: Mapping[str, Any], path: NodePath) -> None:
        self.only(node, {"path", "op", "value"}, path)
        target, op = node.get("path"), node.get("op")
        if not isinstance(target, str) or split_path(target, self.roots) is None:
            allowed = " or ".join(f"{root}.*" for root in self.roots)
            raise self.fail((*path, "path"), f"{target!r} is not a path under {allowed}")
        if not isinstance(op, str) or op not in OPERATORS:
            raise self.fail((*path, "op"), f"unknown operator {op!r}; use one of {', '.join(OPERATORS)}")
        if op == "exists":
            if "value" in node:
                raise self.fail((*path, "value"), "exists takes no value")
            return
        if "value" not in node:
            raise self.fail((*path, "value"), f"{op} needs a value")
        value = node["value"]
        if op in NUMERIC and not _is_number(value):
            raise self.fail((*path, "value"), f"{op} needs a number, got {value!r}")
        if op in STRING and not isinstance(value, str):
            raise self.fail((*path, "value"), f"{op} needs a string, got {value!r}")
        if op == "in" and not isinstance(value, list):
            raise self.fail((*path, "value"), f"in needs a list, got {value!r}")
        if op == "regex":
            try:
                compiled_regex(value)
            except _re2().error as exc:
                detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
                raise self.fail((*path, "value"), f"invalid regex (RE2 syntax, as Go's regexp): {detail}") from exc

    def only(self, node: Mapping[str, Any], allowed: set[str], path: NodePath) -> None:
        extra = sorted(map(str, set(node) - allowed))
        if extra:
            raise self.fail(path, f"unexpected keys {', '.join(extra)}")


@cache
def _re2() -> Any:  # google-re2 has no type stubs
    """google-re2, imported at the first `regex` condition: the library is ~2 ms of the start of
    every process that loads a config (the workers', the CLI's), most of whose pipelines match no
    regex."""
    import re2

    return re2


@cache
def _re2_options() -> Any:
    options = _re2().Options()
    options.log_errors = False  # the refusal message says it; RE2's own log would go to stderr
    return options


@lru_cache(maxsize=512)
def compiled_regex(pattern: str) -> Any:
    """RE2, the syntax and guarantees of the original's Go regexp: linear time whatever the input,
    so a pattern matched against webhook payloads cannot stall a worker (no backtracking)."""
    return _re2().compile(pattern, _re2_options())


def atom_paths(condition: Any) -> list[str]:
    """Every `path:` an (already validated) condition reads."""
    if not isinstance(condition, Mapping):
        return []
    if "path" in condition:
        return [str(condition["path"]).strip()]
    children = [*condition.get("all", []), *condition.get("any", [])]
    if "not" in condition:
        children.append(condition["not"])
    return [p for child in children for p in atom_paths(child)]


def find_root(condition: Any, root: str, path: NodePath = ()) -> NodePath | None:
    """The node path of the first atomic `path:` under `root` (e.g. `("all", 1, "path")`), or None."""
    if not isinstance(condition, Mapping):
        return None
    if "path" in condition:
        return (*path, "path") if str(condition["path"]).strip().split(".")[0] == root else None
    for kind in ("all", "any"):
        if isinstance(condition.get(kind), list):
            for index, child in enumerate(condition[kind]):
                found = find_root(child, root, (*path, kind, index))
                if found is not None:
                    return found
    if "not" in condition:
        return find_root(condition["not"], root, (*path, "not"))
    return None


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
        return bool(
            {"gt": actual > expected, "gte": actual >= expected, "lt": actual < expected, "lte": actual <= expected}[op]
        )
    if not isinstance(actual, str):
        return False
    if op == "regex":
        return compiled_regex(expected).fullmatch(actual) is not None
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
