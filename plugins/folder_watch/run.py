#!/usr/bin/env python3
"""folder_watch: scan configured directories on `poll`, emit created/modified/deleted changes.

Protocol v2, standard library only. Each poll diffs a fresh scan of every watch against the
snapshot the gateway hands back in `state` (the latest `folder_watch.snapshot` fact, mirrored into
plugin_state) and returns the new full snapshot in `state_updates`. Config keys, defaults, event
payloads and dedupe keys are the original Ductile plugin's; where this one differs it says why
(README.md beside this file).

Self-contained on purpose: a plugin directory is the unit the seal fingerprints and the spec's
spawn-per-invocation isolation keeps apart, so nothing is imported from other plugin directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

NAME = "folder_watch"
STRATEGIES = ("mtime_size", "sha256")
EMIT_MODES = ("aggregate", "per_file")
DEFAULT_INCLUDE = ("*", "**/*")
DEFAULT_MAX_FILES = 5000  # the original's limits
DEFAULT_MAX_EVENTS = 500
# Ours: directory entries looked at per watch and poll. max_files bounds the files tracked, not the
# walk: a huge tree whose globs keep few files would otherwise be walked whole on every poll.
DEFAULT_MAX_ENTRIES = 100_000
# The gateway refuses a bigger snapshot (spec §5.9) and fails the poll without saying which
# watch made it so; measured here the way the gateway measures it, to name them.
STATE_LIMIT = 1024 * 1024
DEDUPE_KEY_MAX = 512  # the ledger's column: a longer key is dropped with its event
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


def as_count(value: Any, key: str, default: int) -> int:
    if value is None:
        return default
    try:
        number = int(value.strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise Invalid(f"{key} must be a whole number, got {value!r}") from None
    if isinstance(value, bool) or number < 1:
        raise Invalid(f"{key} must be at least 1, got {value!r}")
    return number


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


def as_choice(value: Any, key: str, default: str, choices: tuple[str, ...]) -> str:
    chosen = default if value is None else str(value).strip().lower()
    if chosen not in choices:
        raise Invalid(f"{key} must be one of: {', '.join(sorted(choices))}")
    return chosen


def as_globs(value: Any, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    if value is None:
        return default
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise Invalid(f"{key} must be a glob or a list of globs")
    # An empty list means the default, as in the original (no include glob would match nothing).
    return tuple(item.strip() for item in items if item.strip()) or default


def as_text(value: Any, key: str) -> str:
    text = "" if value is None or isinstance(value, (dict, list, bool)) else str(value).strip()
    if not text:
        raise Invalid(f"{key} is required")
    return text


@dataclass(frozen=True)
class Watch:
    id: str
    root: str
    event_type: str
    strategy: str
    emit_mode: str
    recursive: bool
    include_globs: tuple[str, ...]
    exclude_globs: tuple[str, ...]
    ignore_hidden: bool
    emit_initial: bool
    emit_deleted: bool
    follow_symlinks: bool
    min_stable_age: float
    max_files: int
    max_events: int
    max_entries: int


def parse_watch(item: dict[str, Any], at: str) -> Watch:
    root = as_text(item.get("root"), f"{at}.root")
    return Watch(
        id=as_text(item.get("id"), f"{at}.id"),
        # Resolved once, as the original does: a configured symlink is the operator's choice.
        root=os.path.realpath(os.path.expanduser(root)),
        event_type=as_text(item.get("event_type"), f"{at}.event_type"),
        strategy=as_choice(item.get("strategy"), f"{at}.strategy", "mtime_size", STRATEGIES),
        emit_mode=as_choice(item.get("emit_mode"), f"{at}.emit_mode", "aggregate", EMIT_MODES),
        recursive=as_bool(item.get("recursive"), f"{at}.recursive", True),
        include_globs=as_globs(item.get("include_globs"), f"{at}.include_globs", DEFAULT_INCLUDE),
        exclude_globs=as_globs(item.get("exclude_globs"), f"{at}.exclude_globs", ()),
        ignore_hidden=as_bool(item.get("ignore_hidden"), f"{at}.ignore_hidden", True),
        emit_initial=as_bool(item.get("emit_initial"), f"{at}.emit_initial", False),
        emit_deleted=as_bool(item.get("emit_deleted"), f"{at}.emit_deleted", True),
        follow_symlinks=as_bool(item.get("follow_symlinks"), f"{at}.follow_symlinks", False),
        min_stable_age=as_seconds(item.get("min_stable_age"), f"{at}.min_stable_age"),
        max_files=as_count(item.get("max_files"), f"{at}.max_files", DEFAULT_MAX_FILES),
        max_events=as_count(item.get("max_events"), f"{at}.max_events", DEFAULT_MAX_EVENTS),
        max_entries=as_count(item.get("max_entries"), f"{at}.max_entries", DEFAULT_MAX_ENTRIES),
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


# -- scanning ----------------------------------------------------------------------------------


def glob_match(rel: str, pattern: str) -> bool:
    """The original's matching, kept so its configs select the same files: a pattern matches the
    path's last components one by one (`*.md` matches `a/b.md`), `**` is one component like `*`,
    and a leading `**/` may also match no directory at all (`**/*.md` matches `b.md`)."""
    wanted = pattern_parts(pattern)
    if not wanted or pattern.startswith("/"):
        return False  # the original never matched an absolute pattern against a relative path
    parts = PurePosixPath(rel).parts
    if len(wanted) <= len(parts) and all(map(fnmatchcase, parts[len(parts) - len(wanted) :], wanted)):
        return True
    return pattern.startswith("**/") and glob_match(rel, pattern[3:])


@lru_cache(maxsize=256)
def pattern_parts(pattern: str) -> tuple[str, ...]:
    return PurePosixPath(pattern).parts


def selected(rel: str, watch: Watch) -> bool:
    included = any(glob_match(rel, p) for p in watch.include_globs)
    return included and not any(glob_match(rel, p) for p in watch.exclude_globs)


def fingerprint(path: str, strategy: str) -> tuple[str, int, int]:
    """(fingerprint, size, mtime_ns) of the file `path` names (a symlink's target)."""
    st = os.stat(path)
    if strategy == "mtime_size":
        return f"{st.st_mtime_ns}:{st.st_size}", st.st_size, st.st_mtime_ns
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest(), st.st_size, st.st_mtime_ns


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass
class Scan:
    files: dict[str, str] = field(default_factory=dict)
    meta: dict[str, tuple[int, int]] = field(default_factory=dict)
    scanned: int = 0  # candidate files met (the original's scanned_files)
    entries: int = 0
    skipped_unstable: int = 0
    skipped_links: int = 0
    truncated: bool = False
    error: str | None = None
    hashed: int = 0
    hashed_bytes: int = 0
    hash_ns: int = 0
    logs: list[dict[str, str]] = field(default_factory=list)

    def warn(self, message: str) -> None:
        self.logs.append({"level": "warn", "message": message})


def scan(watch: Watch, previous: dict[str, str], now: float) -> Scan:
    """Walk `watch.root` in the original's order (each directory's entries sorted by name, files
    before the subdirectories below them) and fingerprint the selected files.

    What cannot be judged this poll keeps its previous fingerprint, so it is neither reported
    deleted nor created again: a file younger than min_stable_age, a file or directory that cannot
    be read (the original reported those as deleted, then created again)."""
    found = Scan()
    pending = [""]
    while pending and not found.truncated:
        rel_dir = pending.pop()
        directory = os.path.join(watch.root, rel_dir) if rel_dir else watch.root
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            found.warn(f"{watch.id}: cannot read directory {shown(directory)}: {exc.strerror or exc}")
            keep_previous(found, previous, rel_dir)
            if not rel_dir:
                found.error = "root_unreadable"
            continue
        subdirs: list[str] = []
        for entry in entries:
            found.entries += 1
            if found.entries > watch.max_entries:
                found.truncated = True
                found.warn(f"{watch.id}: scan stopped after max_entries={watch.max_entries} directory entries")
                break
            if watch.ignore_hidden and entry.name.startswith("."):
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if not visit(watch, entry, rel, previous, now, found, subdirs):
                break
        pending.extend(reversed(subdirs))
    return found


def keep_previous(found: Scan, previous: dict[str, str], rel_dir: str) -> None:
    prefix = f"{rel_dir}/" if rel_dir else ""
    for rel, value in previous.items():
        if rel.startswith(prefix) and rel not in found.files:
            found.files[rel] = value


def visit(
    watch: Watch,
    entry: os.DirEntry[str],
    rel: str,
    previous: dict[str, str],
    now: float,
    found: Scan,
    subdirs: list[str],
) -> bool:
    """One directory entry; False once max_files is reached (the walk stops there, as the original's)."""
    if not utf8(rel):
        # The gateway stores responses as JSON text, which cannot carry such a name: one path
        # in a response would fail every poll.
        found.warn(f"{watch.id}: skipped {shown(entry.path)}: its name is not valid UTF-8")
        return True
    try:
        if entry.is_dir(follow_symlinks=False):
            if watch.recursive:
                subdirs.append(rel)
            return True
        link = entry.is_symlink()
        if link and os.path.isdir(entry.path):
            return True  # never entered: no loops, no second copy of a tree (the original's rule)
        if not link and not entry.is_file(follow_symlinks=False):
            return True  # a FIFO, socket or device: reading one could block the poll for ever
    except OSError as exc:
        found.warn(f"{watch.id}: cannot read {shown(entry.path)}: {exc.strerror or exc}")
        return True
    found.scanned += 1
    if not selected(rel, watch) or (link and not followable(watch, entry.path, found)):
        return True
    if len(found.files) >= watch.max_files:
        found.truncated = True
        found.warn(f"{watch.id}: state truncated at max_files={watch.max_files}")
        return False
    try:
        st = os.stat(entry.path)
    except OSError as exc:
        found.warn(f"{watch.id}: stat failed for {shown(entry.path)}: {exc.strerror or exc}")
        return True
    if watch.min_stable_age > 0 and now - st.st_mtime < watch.min_stable_age:
        found.skipped_unstable += 1
        if rel in previous:
            found.files[rel] = previous[rel]
        return True
    started = time.perf_counter_ns()
    try:
        value, size, mtime_ns = fingerprint(entry.path, watch.strategy)
    except OSError as exc:
        found.warn(f"{watch.id}: fingerprint failed for {shown(entry.path)}: {exc.strerror or exc}")
        if rel in previous:
            found.files[rel] = previous[rel]
        return True
    found.hash_ns += time.perf_counter_ns() - started
    found.hashed += 1
    found.hashed_bytes += size
    found.files[rel] = value
    found.meta[rel] = (size, mtime_ns)
    return True


def followable(watch: Watch, path: str, found: Scan) -> bool:
    """A symlink to a file is fingerprinted as its target when the target is inside the root, or
    anywhere with follow_symlinks: true (the original followed every one, out of the root too)."""
    target = os.path.realpath(path)
    if not os.path.isfile(target):
        if not os.path.exists(target):
            found.warn(f"{watch.id}: stat failed for {shown(path)}: broken symlink to {shown(target)}")
        return False
    if watch.follow_symlinks or inside(target, watch.root):
        return True
    found.skipped_links += 1
    return False


def utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(path: str) -> str:
    """A path as a log line can carry it: undecodable bytes as escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


# -- diffing and events ------------------------------------------------------------------------


def snapshot_hash(files: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}={files[rel]}\n".encode())
    return digest.hexdigest()


def dedupe_key(*parts: str) -> str:
    """`folder_watch:<parts>`, or, past the ledger's 512 characters (a very long path), the same
    key with the parts replaced by their digest, so the event is still routed."""
    key = ":".join((NAME, *parts))
    if len(key) <= DEDUPE_KEY_MAX:
        return key
    return f"{NAME}:{parts[0][:64]}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"


def aggregate_event(watch: Watch, found: Scan, digest: str, changes: dict[str, list[str]]) -> dict[str, Any]:
    capped = {kind: paths[: watch.max_events] for kind, paths in changes.items()}
    return {
        "type": watch.event_type,
        "payload": {
            "watch_id": watch.id,
            "root": watch.root,
            **capped,
            "changed_count": sum(len(paths) for paths in changes.values()),
            "snapshot_hash": digest,
            "payload_capped": any(len(paths) > watch.max_events for paths in changes.values()),
            "state_truncated": found.truncated,
        },
        "dedupe_key": dedupe_key(watch.id, digest),
    }


def per_file_events(
    watch: Watch, found: Scan, previous: dict[str, str], changes: dict[str, list[str]]
) -> list[dict[str, Any]]:
    events = []
    for kind in ("created", "modified", "deleted"):
        for rel in changes[kind]:
            payload: dict[str, Any] = {"watch_id": watch.id, "root": watch.root, "path": rel, "change_type": kind}
            if kind == "deleted":
                payload["previous_fingerprint"] = previous.get(rel, "")
                key = dedupe_key(watch.id, rel, "deleted", payload["previous_fingerprint"])
            else:
                size, mtime_ns = found.meta.get(rel, (0, 0))
                payload.update(fingerprint=found.files[rel], size=size, mtime_ns=mtime_ns)
                key = dedupe_key(watch.id, rel, found.files[rel])
            events.append({"type": watch.event_type, "payload": payload, "dedupe_key": key})
    return events[: watch.max_events]


def diff(previous: dict[str, str], current: dict[str, str], emit_deleted: bool) -> dict[str, list[str]]:
    return {
        "created": sorted(current.keys() - previous.keys()),
        "modified": sorted(rel for rel in current.keys() & previous.keys() if current[rel] != previous[rel]),
        "deleted": sorted(previous.keys() - current.keys()) if emit_deleted else [],
    }


def string_map(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def iso_now() -> str:
    return datetime.now(timezone.utc).isoformat()


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
    totals = {"scan_ns": 0, "scanned": 0, "hashed": 0, "bytes": 0, "hash_ns": 0, "diff_ns": 0}
    for watch in watches:
        entry = known.get(watch.id)
        before: dict[str, Any] = entry if isinstance(entry, dict) else {}
        # A watch seen before, on the same root with the same strategy: otherwise this poll is its
        # baseline (fingerprints of another strategy or root cannot be compared; the original
        # reported every file as modified).
        same = (
            isinstance(entry, dict)
            and before.get("root") == watch.root
            and before.get("strategy", watch.strategy) == watch.strategy
        )
        previous = string_map(before.get("files")) if same else {}
        if not os.path.isdir(watch.root):
            logs.append({"level": "error", "message": f"{watch.id}: root directory not found: {watch.root}"})
            snapshots[watch.id] = watch_snapshot(watch, previous, Scan(), "root_not_found")
            continue
        started = time.perf_counter_ns()
        found = scan(watch, previous, now)
        totals["scan_ns"] += time.perf_counter_ns() - started
        totals["scanned"] += 1
        totals["hashed"] += found.hashed
        totals["bytes"] += found.hashed_bytes
        totals["hash_ns"] += found.hash_ns
        logs.extend(found.logs)
        started = time.perf_counter_ns()
        digest = snapshot_hash(found.files)
        changes = diff(previous, found.files, watch.emit_deleted)
        if same or watch.emit_initial:
            if any(changes.values()):
                if watch.emit_mode == "aggregate":
                    events.append(aggregate_event(watch, found, digest, changes))
                else:
                    events.extend(per_file_events(watch, found, previous, changes))
                counts = " ".join(f"{kind}={len(paths)}" for kind, paths in changes.items())
                logs.append({"level": "info", "message": f"{watch.id}: changes detected {counts}"})
        else:
            logs.append({"level": "info", "message": f"{watch.id}: baseline of {len(found.files)} file(s), no events"})
        if found.skipped_links:
            logs.append(
                {
                    "level": "warn",
                    "message": f"{watch.id}: {found.skipped_links} symlink(s) to files outside {watch.root} skipped "
                    "(follow_symlinks: true follows them)",
                }
            )
        logs.append(
            {
                "level": "info",
                "message": f"{watch.id}: scanned={found.scanned} tracked={len(found.files)} "
                f"skipped_unstable={found.skipped_unstable}",
            }
        )
        snapshots[watch.id] = watch_snapshot(watch, found.files, found, found.error, digest)
        totals["diff_ns"] += time.perf_counter_ns() - started
    state_updates = {"watches": snapshots, "last_poll_at": iso_now()}
    size = len(json.dumps(state_updates))
    if size > STATE_LIMIT:
        sizes = ", ".join(f"{wid}: {s['file_count']} files" for wid, s in snapshots.items())
        message = (
            f"{NAME} snapshot is {size} bytes, over the gateway's {STATE_LIMIT}-byte state limit ({sizes}); "
            "lower max_files or narrow include_globs"
        )
        return failure(message, [message])
    summary = f"{NAME} poll complete: watches={len(watches)} events={len(events)}"
    logs.append({"level": "info", "message": summary})
    response: dict[str, Any] = {"status": "ok", "result": summary, "logs": logs, "state_updates": state_updates}
    if events:
        response["events"] = events
    if totals["scanned"]:
        response["ductile_stopwatch_subs"] = [
            {"name": f"{NAME}.scan", "dur_ns": totals["scan_ns"], "count": totals["scanned"], "status": "ok"},
            {
                "name": f"{NAME}.fingerprint_total",
                "dur_ns": totals["hash_ns"],
                "count": totals["hashed"],
                "bytes": totals["bytes"],
                "status": "ok",
            },
            {"name": f"{NAME}.diff_and_emit", "dur_ns": totals["diff_ns"], "count": len(events), "status": "ok"},
        ]
    return response


def watch_snapshot(
    watch: Watch, files: dict[str, str], found: Scan, error: str | None, digest: str | None = None
) -> dict[str, Any]:
    """One watch's entry in the snapshot: the same keys on every poll (spec "Plugin Facts": a
    presence-stable full snapshot)."""
    return {
        "root": watch.root,
        "files": dict(sorted(files.items())),
        "snapshot_hash": digest if digest is not None else snapshot_hash(files),
        "file_count": len(files),
        "scanned_files": found.scanned,
        "skipped_unstable": found.skipped_unstable,
        "truncated": found.truncated,
        "strategy": watch.strategy,
        "updated_at": iso_now(),
        "error": error,
    }


def health(config: dict[str, Any]) -> dict[str, Any]:
    watches, problems = parse_watches(config)
    if problems:
        return failure(f"invalid {NAME} config: {'; '.join(problems)}", problems)
    issues = []
    for watch in watches:
        if not os.path.isdir(watch.root):
            issues.append(f"{watch.id}: root directory not found: {watch.root}")
        elif not os.access(watch.root, os.R_OK | os.X_OK):
            issues.append(f"{watch.id}: root directory is not readable: {watch.root}")
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
