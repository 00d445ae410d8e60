#!/usr/bin/env python3
"""file_handler: write a pipeline's result to a file, or read one back, only inside the directories
the instance's config allows (spec 000 "Deployment Guide" §2-§3 and the playlist cookbook).

Every path is checked after symlinks are resolved, and the check is made on the directory actually
opened (its /proc/self/fd link), never on a name that could be swapped for a symlink between the
check and the write. Writes go to a temporary file in the same directory, renamed into place, so a
reader never sees half a summary. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_MAX_READ_BYTES = 1024 * 1024
# The payload names a write takes its text from, in order (the cookbook's `result` flows in from
# the step before; `content` and `text` are the names other plugins emit).
CONTENT_KEYS = ("content", "result", "text")


class Refused(Exception):
    """The request cannot succeed as given; retrying it gives the same answer."""


def error(message: str, *, retry: bool = False) -> dict[str, Any]:
    return {"status": "error", "error": message, "retry": retry, "logs": [{"level": "error", "message": message}]}


def roots(config: dict[str, Any], key: str) -> list[Path]:
    """`allowed_*_paths` as the spec writes it (one string) or a list; a string may hold several
    directories separated by ':' or ','. Each is resolved once, symlinks and all."""
    raw = config.get(key)
    if raw is None or raw == "":
        return []
    items = raw if isinstance(raw, list) else str(raw).replace(",", os.pathsep).split(os.pathsep)
    found = []
    for item in items:
        text = str(item).strip()
        if text:
            found.append(Path(os.path.realpath(os.path.expanduser(text))))
    return found


def inside(path: Path, allowed: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in allowed)


def opened_path(fd: int) -> Path:
    return Path(os.readlink(f"/proc/self/fd/{fd}"))


def check_inside(path: Path, allowed: list[Path], key: str) -> None:
    if not allowed:
        raise Refused(f"{key} is not configured: file_handler touches no file it was not granted")
    if not inside(path, allowed):
        granted = ", ".join(str(root) for root in allowed)
        raise Refused(f"{path} is outside {key} ({granted})")


def payload_of(request: dict[str, Any]) -> dict[str, Any]:
    event = request.get("event")
    payload = event.get("payload") if isinstance(event, dict) else None
    return payload if isinstance(payload, dict) else {}


def write_target(config: dict[str, Any], payload: dict[str, Any], job_id: str) -> Path:
    """payload.output_path, else payload.filename in payload.output_dir (else default_output_dir);
    the filename defaults to <video_id>.md (the playlist cookbook), else <job id>.md."""
    directory = payload.get("output_dir") or config.get("default_output_dir")
    output_path = payload.get("output_path")
    if output_path:
        target = Path(os.path.expanduser(str(output_path)))
        if not target.is_absolute():
            if not directory:
                raise Refused(
                    f"output_path {output_path!r} is relative and there is no output_dir or default_output_dir"
                )
            target = Path(os.path.expanduser(str(directory))) / target
        return target
    if not directory:
        raise Refused(
            "nowhere to write: the payload has no output_path or output_dir and default_output_dir is not set"
        )
    filename = payload.get("filename")
    if not filename:
        stem = payload.get("video_id") or job_id
        filename = f"{stem}.md"
    filename = str(filename)
    if "/" in filename or filename in (".", "..") or "\0" in filename:
        raise Refused(f"filename {filename!r} must be a plain file name (use output_path for a path)")
    return Path(os.path.expanduser(str(directory))) / filename


def content_of(payload: dict[str, Any]) -> bytes:
    for key in CONTENT_KEYS:
        value = payload.get(key)
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False) + "\n"
        return text.encode()
    raise Refused(f"nothing to write: the payload has none of {', '.join(CONTENT_KEYS)}")


def open_directory(directory: Path, allowed: list[Path]) -> int:
    """The directory's fd, created under an allowed root if missing, checked where it really is."""
    resolved = Path(os.path.realpath(directory))
    check_inside(resolved, allowed, "allowed_write_paths")
    try:
        resolved.mkdir(parents=True, exist_ok=True)
        fd = os.open(resolved, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise Refused(f"cannot open directory {resolved}: {exc.strerror}") from None
    try:
        check_inside(opened_path(fd), allowed, "allowed_write_paths")
    except Refused:
        os.close(fd)
        raise
    return fd


def write(config: dict[str, Any], payload: dict[str, Any], job_id: str) -> dict[str, Any]:
    allowed = roots(config, "allowed_write_paths")
    target = write_target(config, payload, job_id)
    data = content_of(payload)
    directory = open_directory(target.parent, allowed)
    name = target.name
    try:
        try:
            os.stat(name, dir_fd=directory, follow_symlinks=False)
            created = False
        except FileNotFoundError:
            created = True
        if not created and config.get("overwrite") is False:
            raise Refused(f"{opened_path(directory) / name} exists and overwrite is false")
        temporary = f".{name}.{os.getpid()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            # The rename replaces a symlink at `name` rather than writing through it.
            os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=directory)
            except OSError:
                pass
            raise
        written = opened_path(directory) / name
    except OSError as exc:
        # A full disk or a permission change may pass: the gateway's retry budget decides.
        return error(f"cannot write {target}: {exc.strerror}", retry=True)
    finally:
        os.close(directory)
    said = f"wrote {len(data)} bytes to {written}"
    event = {
        "type": "file_handler.written",
        "payload": {
            "path": str(written),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "created": created,
        },
    }
    return {"status": "ok", "result": str(written), "events": [event], "logs": [{"level": "info", "message": said}]}


def read(config: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    allowed = roots(config, "allowed_read_paths")
    raw = payload.get("path") or payload.get("output_path")
    if not raw:
        raise Refused("nothing to read: the payload has no path")
    resolved = Path(os.path.realpath(os.path.expanduser(str(raw))))
    check_inside(resolved, allowed, "allowed_read_paths")
    limit = int(config.get("max_read_bytes") or DEFAULT_MAX_READ_BYTES)
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise Refused(f"cannot read {resolved}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as source:
        check_inside(opened_path(source.fileno()), allowed, "allowed_read_paths")
        data = source.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"{resolved} is larger than max_read_bytes ({limit})")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise Refused(f"{resolved} is not UTF-8 text") from None
    event = {"type": "file_handler.read", "payload": {"path": str(resolved), "content": text, "bytes": len(data)}}
    said = f"read {len(data)} bytes from {resolved}"
    return {"status": "ok", "result": text, "events": [event], "logs": [{"level": "info", "message": said}]}


def health(config: dict[str, Any]) -> dict[str, Any]:
    problems = []
    for key in ("allowed_read_paths", "allowed_write_paths"):
        problems += [f"{key}: {root} is not a directory" for root in roots(config, key) if not root.is_dir()]
    default = config.get("default_output_dir")
    if default:
        resolved = Path(os.path.realpath(os.path.expanduser(str(default))))
        allowed = roots(config, "allowed_write_paths")
        if not inside(resolved, allowed):
            problems.append(f"default_output_dir {resolved} is outside allowed_write_paths")
        elif resolved.is_dir() and not os.access(resolved, os.W_OK):
            problems.append(f"default_output_dir {resolved} is not writable")
    if problems:
        return error("; ".join(problems))
    said = "config ok"
    return {"status": "ok", "result": said, "logs": [{"level": "info", "message": said}]}


def respond(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        return error("the request must be a JSON object")
    command = request.get("command")
    raw_config = request.get("config")
    config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
    payload = payload_of(request)
    try:
        if command == "health":
            return health(config)
        action = payload.get("action") or "write"
        if command == "handle" and action not in ("read", "write"):
            raise Refused(f"payload.action {action!r} is not read or write")
        if command == "read" or (command == "handle" and action == "read"):
            return read(config, payload)
        if command in ("write", "handle"):
            return write(config, payload, str(request.get("job_id") or "output"))
    except Refused as exc:
        return error(str(exc))
    return error(f"unknown command {command!r} (file_handler answers handle, write, read and health)")


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
