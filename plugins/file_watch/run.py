#!/usr/bin/env python3
"""file_watch: check configured files on `poll`, emit created/modified/deleted transitions.

Protocol v2, standard library only. Each poll compares every watched file with the snapshot the
gateway hands back in `state` (the latest `file_watch.snapshot` fact, mirrored into plugin_state)
and returns the new full snapshot in `state_updates`. Config keys, defaults, event payloads and
dedupe keys are the original Ductile plugin's; where this one differs it says why (README.md).

Self-contained on purpose, like folder_watch beside it: a plugin directory is the unit the seal
fingerprints and the spec's spawn-per-invocation isolation keeps apart, so the few helpers both
need (durations, booleans, fingerprints) are written in each rather than imported across them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

NAME = "file_watch"
STRATEGIES = ("mtime_size", "sha256")
DEDUPE_KEY_MAX = 512  # the ledger's column: a longer key is dropped with its event
# One fingerprint slower than this gets a span of its own beside the total (the original's rule:
# outliers visible without one span per watch).
SLOW_NS = 50_000_000
CHUNK = 1024 * 1024

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)\s*$")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


# -- config ------------------------------------------------------------------------------------


class Invalid(ValueError):
    """A config value the plugin cannot use; the message names its key."""


def as_bool(value: Any, key: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise Invalid(f"{key} must be a boolean, got {value!r}")


def as_seconds(value: Any, key: str) -> float:
    """Seconds as a number, or a duration such as `30s`, `1.5m`, `250ms` (the original's units)."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return float(text)
        match = _DURATION.match(text)
        if match:
            return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    raise Invalid(f"{key} must be seconds or a duration such as 30s, 5m or 1h, got {value!r}")


def as_text(value: Any, key: str) -> str:
    text = "" if value is None or isinstance(value, (dict, list, bool)) else str(value).strip()
    if not text:
        raise Invalid(f"{key} is required")
    return text


@dataclass(frozen=True)
class Watch:
    id: str
    path: str
    event_type: str
    strategy: str
    emit_initial: bool
    emit_deleted: bool
    min_stable_age: float


def parse_watch(item: dict[str, Any], at: str) -> Watch:
    strategy = "sha256" if item.get("strategy") is None else str(item["strategy"]).strip().lower()
    if strategy not in STRATEGIES:
        raise Invalid(f"{at}.strategy must be one of: {', '.join(sorted(STRATEGIES))}")
    path = as_text(item.get("path"), f"{at}.path")
    return Watch(
        id=as_text(item.get("id"), f"{at}.id"),
        # Resolved once, as the original does: a symlink named in config is the operator's choice.
        path=os.path.realpath(os.path.expanduser(path)),
        event_type=as_text(item.get("event_type"), f"{at}.event_type"),
        strategy=strategy,
        emit_initial=as_bool(item.get("emit_initial"), f"{at}.emit_initial", False),
        emit_deleted=as_bool(item.get("emit_deleted"), f"{at}.emit_deleted", True),
        min_stable_age=as_seconds(item.get("min_stable_age"), f"{at}.min_stable_age"),
    )


def parse_watches(config: dict[str, Any]) -> tuple[list[Watch], list[str]]:
    """Every watch, or every problem (each naming its key) when any is wrong."""
    raw = config.get("watches")
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], ["config.watches must be a list"]
    watches: list[Watch] = []
    problems: list[str] = []
    for index, item in enumerate(raw):
        at = f"watches[{index}]"
        if not isinstance(item, dict):
            problems.append(f"{at} must be an object")
            continue
        try:
            watch = parse_watch(item, at)
        except Invalid as exc:
            problems.append(str(exc))
            continue
        if any(w.id == watch.id for w in watches):
            problems.append(f"duplicate watch id: {watch.id}")
            continue
        watches.append(watch)
    return watches, problems


# -- observing ---------------------------------------------------------------------------------


def fingerprint(path: str, strategy: str) -> tuple[str, int, int]:
    """(fingerprint, size, mtime_ns) of the file at `path`."""
    st = os.stat(path)
    if strategy == "mtime_size":
        return f"{st.st_mtime_ns}:{st.st_size}", st.st_size, st.st_mtime_ns
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest(), st.st_size, st.st_mtime_ns


def dedupe_key(*parts: str) -> str:
    """`file_watch:<parts>`, or past the ledger's 512 characters (a very long watch id) the
    digest of that key, so the event is still routed."""
    key = ":".join((NAME, *parts))
    if len(key) <= DEDUPE_KEY_MAX:
        return key
    return f"{NAME}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"


def iso_now() -> str:
    return datetime.now(timezone.utc).isoformat()


def change_event(watch: Watch, change: str, entry: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {"watch_id": watch.id, "path": watch.path, "change_type": change, "changed_at": iso_now()}
    if change == "deleted":
        recorded = before.get("fingerprint")
        previous = recorded if isinstance(recorded, str) else ""
        payload["previous_fingerprint"] = previous
        key = dedupe_key(watch.id, "deleted", previous)
    else:
        payload.update(fingerprint=entry["fingerprint"], size=entry["size"], mtime_ns=entry["mtime_ns"])
        key = dedupe_key(watch.id, entry["fingerprint"])
    return {"type": watch.event_type, "payload": payload, "dedupe_key": key}


@dataclass
class Totals:
    count: int = 0
    bytes: int = 0
    ns: int = 0


def observe(
    watch: Watch, before: dict[str, Any] | None, now: float, logs: list[dict[str, str]], totals: Totals, subs: list[Any]
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the watch's new snapshot entry or None to keep the previous one, the event or None)."""
    if not os.path.isfile(watch.path):
        entry = {"exists": False, "path": watch.path, "updated_at": iso_now()}
        if before and before.get("exists") and watch.emit_deleted:
            return entry, change_event(watch, "deleted", entry, before)
        return entry, None
    try:
        mtime = os.stat(watch.path).st_mtime
    except OSError as exc:
        logs.append({"level": "warn", "message": f"{watch.id}: stat failed for {watch.path}: {exc.strerror or exc}"})
        return None, None
    age = now - mtime
    if watch.min_stable_age > 0 and age < watch.min_stable_age:
        logs.append(
            {
                "level": "info",
                "message": f"{watch.id}: file not stable yet ({age:.3f}s < {watch.min_stable_age:.3f}s)",
            }
        )
        return None, None
    started = time.perf_counter_ns()
    try:
        value, size, mtime_ns = fingerprint(watch.path, watch.strategy)
    except OSError as exc:
        logs.append(
            {"level": "warn", "message": f"{watch.id}: fingerprint failed for {watch.path}: {exc.strerror or exc}"}
        )
        return None, None
    spent = time.perf_counter_ns() - started
    totals.count, totals.bytes, totals.ns = totals.count + 1, totals.bytes + size, totals.ns + spent
    if spent > SLOW_NS:
        subs.append({"name": f"{NAME}.fingerprint_slow.{watch.id}", "dur_ns": spent, "bytes": size, "status": "ok"})
    entry = {
        "exists": True,
        "fingerprint": value,
        "size": size,
        "mtime_ns": mtime_ns,
        "path": watch.path,
        "strategy": watch.strategy,
        "updated_at": iso_now(),
    }
    if before is None:
        change = "created" if watch.emit_initial else None
    elif not before.get("exists"):
        change = "created"
    elif before.get("fingerprint") != value and before.get("strategy", watch.strategy) == watch.strategy:
        # A fingerprint of another strategy cannot be compared: a changed strategy re-baselines
        # (the original reported the file as modified).
        change = "modified"
    else:
        change = None
    return entry, change_event(watch, change, entry, before or {}) if change else None


# -- commands ----------------------------------------------------------------------------------


def poll(config: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    watches, problems = parse_watches(config)
    if problems:
        return failure(f"invalid {NAME} config: {'; '.join(problems)}", problems)
    recorded = state.get("watches")
    known: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    now = time.time()
    snapshots: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    logs: list[dict[str, str]] = []
    totals = Totals()
    slow: list[Any] = []
    for watch in watches:
        before = known.get(watch.id)
        # A watch whose path changed is a new watch: its first look is a baseline.
        if not isinstance(before, dict) or before.get("path", watch.path) != watch.path:
            before = None
        entry, event = observe(watch, before, now, logs, totals, slow)
        if entry is None:
            if before is not None:
                snapshots[watch.id] = before  # not judged this poll: the previous entry stands
            continue
        snapshots[watch.id] = entry
        if event:
            events.append(event)
            logs.append({"level": "info", "message": f"{watch.id}: detected {event['payload']['change_type']}"})
    summary = f"{NAME} poll complete: watches={len(watches)} events={len(events)}"
    logs.append({"level": "info", "message": summary})
    response: dict[str, Any] = {
        "status": "ok",
        "result": summary,
        "logs": logs,
        "state_updates": {"watches": snapshots, "last_poll_at": iso_now()},
    }
    if events:
        response["events"] = events
    if totals.count:
        total = {"name": f"{NAME}.fingerprint_total", "dur_ns": totals.ns, "count": totals.count, "bytes": totals.bytes}
        response["ductile_stopwatch_subs"] = [{**total, "status": "ok"}, *slow]
    return response


def health(config: dict[str, Any]) -> dict[str, Any]:
    watches, problems = parse_watches(config)
    if problems:
        return failure(f"invalid {NAME} config: {'; '.join(problems)}", problems)
    issues = []
    for watch in watches:
        parent = os.path.dirname(watch.path)
        if not os.path.isdir(parent):
            issues.append(f"{watch.id}: parent directory does not exist: {parent}")
        elif os.path.isdir(watch.path):
            issues.append(f"{watch.id}: path is a directory, expected file: {watch.path}")
        elif os.path.exists(watch.path) and not os.access(watch.path, os.R_OK):
            issues.append(f"{watch.id}: file exists but is not readable: {watch.path}")
    if issues:
        return failure(f"{NAME} health failed: {'; '.join(issues)}", issues)
    result = f"{NAME} health OK (watches={len(watches)})"
    return {"status": "ok", "result": result, "logs": [{"level": "info", "message": result}]}


def failure(message: str, details: list[str]) -> dict[str, Any]:
    """A permanent failure: retrying cannot fix a config or a missing directory."""
    logs = [{"level": "error", "message": detail} for detail in details]
    return {"status": "error", "error": message, "retry": False, "logs": logs}


def main() -> None:
    try:
        request = json.load(sys.stdin)
    except ValueError as exc:
        json.dump(failure(f"invalid JSON input: {exc}", [str(exc)]), sys.stdout)
        return
    command = str(request.get("command", "")).strip()
    config = request.get("config") if isinstance(request.get("config"), dict) else {}
    state = request.get("state") if isinstance(request.get("state"), dict) else {}
    if command == "poll":
        response = poll(config, state)
    elif command == "health":
        response = health(config)
    else:
        message = f"unknown command: {command!r}. Supported commands: poll, health"
        response = failure(message, [message])
    json.dump(response, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
