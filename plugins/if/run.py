#!/usr/bin/env python3
"""if: classify a payload by one field and emit the first matching check's event (spec 000 §8).

The emitted event carries the input payload unchanged and the input event's dedupe_key, so the
pipeline it starts sees exactly what the classifier saw. Standard library only: the regex check is
Python's `re.fullmatch`, as the spec and the original say (the gateway's RE2 is not importable by
the interpreter plugins run with, and its syntax differs).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any

# The order a check's condition is looked for in; a check names exactly one of them.
CONDITIONS = ("contains", "startswith", "endswith", "equals", "regex", "default")
# How much of the field's value an error message quotes.
QUOTE_MAX = 200


class ConfigInvalid(Exception):
    """The instance's config cannot classify anything; every reason, joined."""


@dataclass(frozen=True)
class Check:
    number: int  # 1-based, as error messages and logs name it
    condition: str
    operand: str
    emit: str
    pattern: re.Pattern[str] | None = None

    def matches(self, value: str) -> bool:
        if self.condition == "default":
            return True
        if self.pattern is not None:
            return self.pattern.fullmatch(value) is not None
        # Spec §8.2: the four string checks ignore case; casefold also folds ß, ς and the like.
        folded, operand = value.casefold(), self.operand.casefold()
        if self.condition == "contains":
            return operand in folded
        if self.condition == "startswith":
            return folded.startswith(operand)
        if self.condition == "endswith":
            return folded.endswith(operand)
        return folded == operand

    def describe(self) -> str:
        if self.condition == "default":
            return f"check #{self.number} (default)"
        return f"check #{self.number} ({self.condition} {self.operand!r})"


def parse_check(number: int, raw: Any) -> Check:
    if not isinstance(raw, dict):
        raise ValueError(f"check #{number} must be a mapping, got {type(raw).__name__}")
    named = [c for c in CONDITIONS if c in raw]
    if len(named) != 1:
        found = ", ".join(named) or "none"
        raise ValueError(f"check #{number} must name exactly one of {', '.join(CONDITIONS)} (found: {found})")
    condition = named[0]
    # `- default: text.received` is the spec's shorthand: the default's value is the event to emit.
    emit = raw.get("emit")
    if emit is None and condition == "default":
        emit = raw["default"]
    if emit is None or not str(emit).strip():
        raise ValueError(f"check #{number} ({condition}) needs an `emit` event type")
    operand = "" if condition == "default" else raw[condition]
    if condition != "default" and (operand is None or not str(operand).strip()):
        raise ValueError(f"check #{number} ({condition}) needs a value to compare with")
    pattern = None
    if condition == "regex":
        # Backtracking is possible with Python's re: a pathological pattern costs this job its
        # timeout (the gateway kills the plugin at its deadline), never the gateway's time.
        try:
            pattern = re.compile(str(operand))
        except re.error as exc:
            raise ValueError(f"check #{number} has an invalid regex {str(operand)!r}: {exc}") from None
    return Check(number, condition, str(operand), str(emit).strip(), pattern)


def parse_config(config: dict[str, Any]) -> tuple[str, list[Check]]:
    problems: list[str] = []
    field = config.get("field")
    if field is None or not str(field).strip():
        problems.append("config.field is required (the payload path to classify, e.g. text)")
    raw_checks = config.get("checks")
    checks: list[Check] = []
    if not isinstance(raw_checks, list) or not raw_checks:
        problems.append("config.checks must be a non-empty list")
    else:
        for number, raw in enumerate(raw_checks, start=1):
            try:
                checks.append(parse_check(number, raw))
            except ValueError as exc:
                problems.append(str(exc))
    if problems:
        raise ConfigInvalid("; ".join(problems))
    return str(field).strip(), checks


def field_value(event: dict[str, Any], field: str) -> str:
    """The text a check compares: `payload.a.b`, `event.a.b` or a bare `a.b` (read in the payload).
    A missing or null value is the empty string (spec §8.3); any other value is its `str()`, as
    the original Python plugin compared it (`True`, `3.5`)."""
    payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
    if field == "event":
        return json.dumps(event, ensure_ascii=False)
    root: Any = payload
    path = field
    if field == "payload":
        path = ""
    elif field.startswith("payload."):
        path = field[len("payload.") :]
    elif field.startswith("event."):
        root, path = event, field[len("event.") :]
    value = root
    for part in path.split(".") if path else ():
        if not isinstance(value, dict) or part not in value:
            return ""
        value = value[part]
    return "" if value is None else str(value)


def quoted(value: str) -> str:
    return repr(value if len(value) <= QUOTE_MAX else value[:QUOTE_MAX] + "…")


def error(message: str) -> dict[str, Any]:
    # retry: false everywhere: a config error or an unmatched payload gives the same answer next time.
    return {"status": "error", "error": message, "retry": False, "logs": [{"level": "error", "message": message}]}


def handle(config: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    try:
        field, checks = parse_config(config)
    except ConfigInvalid as exc:
        return error(str(exc))
    value = field_value(event, field)
    for check in checks:
        if check.matches(value):
            emitted: dict[str, Any] = {"type": check.emit, "payload": event.get("payload") or {}}
            if event.get("dedupe_key"):
                emitted["dedupe_key"] = event["dedupe_key"]
            said = f"{check.describe()} matched {field} -> {check.emit}"
            return {"status": "ok", "result": said, "events": [emitted], "logs": [{"level": "info", "message": said}]}
    return error(f"no checks matched and no default provided ({field} = {quoted(value)})")


def health(config: dict[str, Any]) -> dict[str, Any]:
    try:
        field, checks = parse_config(config)
    except ConfigInvalid as exc:
        return error(str(exc))
    said = f"config ok: {len(checks)} checks on {field}"
    return {"status": "ok", "result": said, "logs": [{"level": "info", "message": said}]}


def respond(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        return error("the request must be a JSON object")
    command = request.get("command")
    config = request.get("config") if isinstance(request.get("config"), dict) else {}
    event = request.get("event") if isinstance(request.get("event"), dict) else {}
    if command == "handle":
        return handle(config, event)
    if command in ("health", "init"):
        return health(config)
    return error(f"unknown command {command!r} (if answers handle, health and init)")


def main() -> None:
    try:
        request = json.load(sys.stdin)
    except ValueError as exc:
        response = error(f"the request is not JSON: {exc}")
    else:
        response = respond(request)
    json.dump(response, sys.stdout)


if __name__ == "__main__":
    main()
