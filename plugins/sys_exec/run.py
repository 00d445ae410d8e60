#!/usr/bin/env python3
"""sys_exec: run the operator's configured command and report how it went.

The command comes from config, never from a payload: payload values reach it only as environment
variables (DUCTILE_PAYLOAD_<KEY>), so no event can change what runs. The string form runs under a
shell (`config.shell`, default /bin/sh), the list form is an argv run directly, with `$VAR` and
`${VAR}` in its items replaced from the child's environment, each item staying one argument.
Config keys, event payload and environment follow the original's sys_exec, so its configs run here.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

DEFAULT_EVENT_TYPE = "sys_exec.completed"
DEFAULT_OUTPUT_MAX = 16_384
MIN_OUTPUT_MAX = 64
# Without a deadline from the gateway (the plugin run by hand), the original's default.
FALLBACK_TIMEOUT = 60.0
# Room kept before the job's deadline (beyond KILL_GRACE) to answer with a timeout event
# instead of being killed: a tenth of the time left, between 0.1 and 1 s.
DEADLINE_MARGIN = 1.0
# How long the command's background children may hold its output open after it exits, and how
# long to wait for the output after killing it: past these, answer with what was read; the
# gateway kills whatever is left of the process group when this plugin exits.
EXIT_GRACE = 0.2
KILL_GRACE = 0.2
ENV_PREFIX = "DUCTILE_PAYLOAD_"
MAX_VARIABLE_BYTES = 128 * 1024  # Linux's MAX_ARG_STRLEN: the longest `NAME=value` exec accepts
_NOT_ENV_CHAR = re.compile(r"[^A-Za-z0-9_]")
_VARIABLE = re.compile(r"\$(?:([A-Za-z0-9_]+)|\{([A-Za-z0-9_]+)\})")


class Refused(Exception):
    """The config cannot run: a permanent error, never retried."""


# -- config --------------------------------------------------------------------------------------


def as_bool(value: Any, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
    return default


def as_number(value: Any, default: float, minimum: float) -> float:
    try:
        return max(minimum, float(value))
    except (TypeError, ValueError):
        return default


def as_codes(value: Any) -> frozenset[int] | None:
    """A list of exit codes; None when the key is absent (the caller's "all" or "only 0")."""
    if value is None:
        return None
    codes = set()
    for item in value if isinstance(value, list) else ():
        try:
            codes.add(int(item))
        except (TypeError, ValueError):
            continue
    return frozenset(codes)


@dataclass(frozen=True)
class Settings:
    command: str | list[str]
    shell: str
    working_dir: str | None
    env: dict[str, Any]
    timeout: float | None  # None: until the job's deadline
    stdout_max: int
    stderr_max: int
    emit_event: bool
    include_output: bool
    event_type: str
    fail_on_nonzero: bool
    success_codes: frozenset[int] | None  # None: 0 (or any, with fail_on_nonzero: false)
    retry_codes: frozenset[int]
    emit_on_codes: frozenset[int] | None  # None: every exit code

    @classmethod
    def read(cls, config: dict[str, Any]) -> Settings:
        command = config.get("command")
        if isinstance(command, list):
            if not command:
                raise Refused("config.command list cannot be empty")
            command = [str(item) for item in command]
        elif command is None or not str(command).strip():
            raise Refused("config.command is required")
        else:
            command = str(command)
        working_dir = str(config.get("working_dir") or "").strip()
        if working_dir:
            working_dir = os.path.realpath(os.path.expanduser(working_dir))
            if not os.path.isdir(working_dir):
                raise Refused(f"working_dir is not a directory: {working_dir}")
        env = config.get("env")
        timeout = config.get("timeout_seconds")
        return cls(
            command=command,
            shell=str(config.get("shell") or "/bin/sh"),
            working_dir=working_dir or None,
            env=env if isinstance(env, dict) else {},
            timeout=None if timeout is None else as_number(timeout, FALLBACK_TIMEOUT, 0.001),
            stdout_max=int(as_number(config.get("stdout_max_bytes"), DEFAULT_OUTPUT_MAX, MIN_OUTPUT_MAX)),
            stderr_max=int(as_number(config.get("stderr_max_bytes"), DEFAULT_OUTPUT_MAX, MIN_OUTPUT_MAX)),
            emit_event=as_bool(config.get("emit_event"), True),
            include_output=as_bool(config.get("include_output_in_event"), True),
            event_type=str(config.get("event_type") or "").strip() or DEFAULT_EVENT_TYPE,
            fail_on_nonzero=as_bool(config.get("fail_on_nonzero"), True),
            success_codes=as_codes(config.get("success_exit_codes")),
            retry_codes=as_codes(config.get("retry_on_exit_codes")) or frozenset(),
            emit_on_codes=as_codes(config.get("emit_event_on_exit_codes")),
        )

    def succeeded(self, exit_code: int) -> bool:
        if self.success_codes is not None:
            return exit_code in self.success_codes
        return exit_code == 0 or not self.fail_on_nonzero

    def emits_for(self, exit_code: int) -> bool:
        return self.emit_event and (self.emit_on_codes is None or exit_code in self.emit_on_codes)


# -- the child's environment and argv -----------------------------------------------------------


def env_text(value: Any) -> str:
    """Scalars as text (Python's spelling: True, 3.5), anything else as compact JSON, null as ''."""
    if value is None:
        return ""
    if isinstance(value, (str, int, float, bool)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def payload_variable(key: str) -> str:
    """`video-id` -> DUCTILE_PAYLOAD_VIDEO_ID: upper case, every other character `_`, runs of `_`
    collapsed and trimmed, a leading digit prefixed with `_`, an empty name VALUE."""
    name = re.sub(r"_+", "_", _NOT_ENV_CHAR.sub("_", key.strip().upper())).strip("_") or "VALUE"
    if name[0].isdigit():
        name = "_" + name
    return ENV_PREFIX + name


def payload_environment(payload: dict[str, Any]) -> dict[str, str]:
    """One variable per top-level payload key, in payload order; nested values are JSON. Keys that
    spell the same name get _2, _3... in order of appearance."""
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for key, value in payload.items():
        name = payload_variable(str(key))
        if name in out:
            seen[name] = seen.get(name, 1) + 1
            name = f"{name}_{seen[name]}"
        out[name] = env_text(value)
    return out


def child_environment(
    request: dict[str, Any], settings: Settings, payload: dict[str, Any]
) -> tuple[dict[str, str], list[str]]:
    """The command's environment, and the payload variables left out of it for their size."""
    event = request.get("event") if isinstance(request.get("event"), dict) else {}
    env = dict(os.environ)  # already the gateway's clean plugin environment
    env.update({str(k).strip(): env_text(v) for k, v in settings.env.items() if str(k).strip()})
    from_payload = payload_environment(payload)
    from_payload["DUCTILE_PAYLOAD"] = json.dumps(payload, ensure_ascii=False)
    # Linux refuses to exec with any one `NAME=value` over MAX_ARG_STRLEN: one large field (a
    # fetched page) would stop the command from running at all, so that variable is left out.
    too_big = [k for k, v in from_payload.items() if len(k) + len(v.encode()) + 2 > MAX_VARIABLE_BYTES]
    env.update({k: v for k, v in from_payload.items() if k not in too_big})
    env["DUCTILE_JOB_ID"] = str(request.get("job_id") or "")
    env["DUCTILE_COMMAND"] = str(request.get("command") or "")
    env["DUCTILE_EVENT_TYPE"] = str(event.get("type") or "")
    return env, too_big


def expand(text: str, env: dict[str, str]) -> str:
    """`$VAR` and `${VAR}` from `env`; an unknown name stays as written."""
    return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)


def argv_for(settings: Settings, env: dict[str, str]) -> tuple[list[str], str]:
    """The argv to run and the command as the event reports it (variables expanded, as run)."""
    if isinstance(settings.command, list):
        argv = [expand(item, env) for item in settings.command]
        return argv, " ".join(argv)
    return [settings.shell, "-c", settings.command], expand(settings.command, env)


# -- running ------------------------------------------------------------------------------------


@dataclass
class Captured:
    exit_code: int
    timed_out: bool
    dur_ns: int
    out: bytes
    err: bytes
    out_bytes: int  # everything the stream carried, kept or not
    err_bytes: int


def seconds_left(deadline_at: Any) -> float | None:
    try:
        deadline = datetime.fromisoformat(str(deadline_at).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (deadline - datetime.now(timezone.utc)).total_seconds()


def command_timeout(settings: Settings, request: dict[str, Any]) -> float:
    """The configured timeout_seconds, but never past the job's deadline: the plugin must answer
    (with its timeout event) before the gateway stops it."""
    left = seconds_left(request.get("deadline_at"))
    if left is None:
        return settings.timeout or FALLBACK_TIMEOUT
    budget = max(0.001, left - KILL_GRACE - max(0.1, min(DEADLINE_MARGIN, left / 10)))
    return budget if settings.timeout is None else min(settings.timeout, budget)


def run(argv: list[str], *, cwd: str | None, env: dict[str, str], timeout: float, caps: tuple[int, int]) -> Captured:
    """Run `argv`, keeping the head of each stream up to its cap (memory stays bounded whatever the
    command writes) and counting the rest. Never waits past the timeout plus KILL_GRACE."""
    started = time.perf_counter_ns()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    kept = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    total = dict.fromkeys(kept, 0)
    cap = {proc.stdout.fileno(): caps[0], proc.stderr.fileno(): caps[1]}
    selector = selectors.DefaultSelector()
    for fd in kept:
        selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    timed_out = False
    exited = False
    try:
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                if timed_out or exited:
                    break
                timed_out = True
                proc.kill()
                deadline = time.monotonic() + KILL_GRACE
                continue
            for key, _ in selector.select(min(left, 0.25)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                total[key.fd] += len(chunk)
                room = cap[key.fd] - len(kept[key.fd])
                if room > 0:
                    kept[key.fd] += chunk[:room]
            if not exited and proc.poll() is not None:
                exited = True
                deadline = min(deadline, time.monotonic() + EXIT_GRACE)
    finally:
        selector.close()
        proc.stdout.close()
        proc.stderr.close()
    if timed_out:
        proc.wait()
        exit_code = -1
    else:
        try:
            exit_code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # closed its output but ran on past the timeout
            proc.kill()
            proc.wait()
            timed_out, exit_code = True, -1
    out_fd, err_fd = list(kept)
    return Captured(exit_code, timed_out, time.perf_counter_ns() - started, bytes(kept[out_fd]),
                    bytes(kept[err_fd]), total[out_fd], total[err_fd])


# -- the response -------------------------------------------------------------------------------


def upstream(request: dict[str, Any]) -> str:
    """Who asked, for the log line: the upstream pipeline:plugin, else this step's, else unknown."""
    context = request.get("context") if isinstance(request.get("context"), dict) else {}
    for pipeline_key, plugin_key in (("ductile_upstream_pipeline", "ductile_upstream_plugin"),
                                     ("ductile_pipeline", "ductile_plugin")):
        parts = [str(context.get(k) or "").strip() for k in (pipeline_key, plugin_key)]
        if any(parts):
            return ":".join(p for p in parts if p)
    return "unknown"


def text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def execute(request: dict[str, Any], settings: Settings) -> dict[str, Any]:
    event = request.get("event") if isinstance(request.get("event"), dict) else {}
    payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
    env, too_big = child_environment(request, settings, payload)
    argv, shown = argv_for(settings, env)
    timeout = command_timeout(settings, request)
    try:
        ran = run(argv, cwd=settings.working_dir, env=env, timeout=timeout,
                  caps=(settings.stdout_max, settings.stderr_max))
    except (OSError, ValueError) as exc:  # not found, not executable: the same next time
        return failure(f"command execution failed: {exc}", retry=False)
    left_out = [{"level": "warn", "message": f"{name} left out of the command's environment: its value is over "
                 f"{MAX_VARIABLE_BYTES} bytes"} for name in too_big]
    capture_started = time.perf_counter_ns()
    stdout, stderr = text(ran.out), text(ran.err)
    subs = [
        {"name": "sys_exec.subprocess_run", "dur_ns": ran.dur_ns,
         "status": "timeout" if ran.timed_out else ("ok" if ran.exit_code == 0 else "err"),
         "exit_code": ran.exit_code},
        {"name": "sys_exec.output_capture", "dur_ns": time.perf_counter_ns() - capture_started,
         "bytes": ran.out_bytes + ran.err_bytes, "status": "ok"},
    ]
    duration_ms = ran.dur_ns // 1_000_000
    executed_at = datetime.now(timezone.utc).isoformat()
    if ran.timed_out:
        message = f"command timed out after {timeout:.3f}s"
        payload_out: dict[str, Any] = {"command": shown, "exit_code": -1, "duration_ms": duration_ms,
                                       "timed_out": True, "stderr_truncated": ran.err_bytes > len(ran.err),
                                       "executed_at": executed_at}
        if settings.include_output and stderr:
            payload_out["stderr"] = stderr
        response = failure(message, retry=False,
                           logs=left_out + output_logs(message, "error", shown, stdout, stderr, ran))
        if settings.emit_event:
            response["events"] = [{"type": settings.event_type, "payload": payload_out}]
        response["ductile_stopwatch_subs"] = subs
        return response

    succeeded = settings.succeeded(ran.exit_code)
    summary = f"command exited with code {ran.exit_code} in {duration_ms}ms"
    logs = left_out + output_logs(f"{summary} (upstream {upstream(request)})", "info" if succeeded else "error",
                                  shown, stdout, stderr, ran)
    payload_out = {"command": shown, "exit_code": ran.exit_code, "duration_ms": duration_ms,
                   "stdout_truncated": ran.out_bytes > len(ran.out),
                   "stderr_truncated": ran.err_bytes > len(ran.err),
                   "working_dir": settings.working_dir or "", "executed_at": executed_at}
    if settings.include_output:
        payload_out["stdout"], payload_out["stderr"] = stdout, stderr
    events = [{"type": settings.event_type, "payload": payload_out}] if settings.emits_for(ran.exit_code) else []
    if succeeded:
        response: dict[str, Any] = {"status": "ok", "result": summary, "logs": logs}
    else:
        detail = stderr.strip()[-500:]
        error = f"command failed with exit code {ran.exit_code}" + (f": {detail}" if detail else "")
        response = failure(error, retry=ran.exit_code in settings.retry_codes, logs=logs)
    if events:
        response["events"] = events
    response["ductile_stopwatch_subs"] = subs
    return response


def output_logs(first: str, level: str, shown: str, stdout: str, stderr: str, ran: Captured) -> list[dict[str, str]]:
    logs = [{"level": level, "message": first}, {"level": "debug", "message": f"command: {shown}"}]
    if stdout:
        logs.append({"level": "info", "message": f"stdout: {stdout}"})
    if stderr:
        logs.append({"level": "warn", "message": f"stderr: {stderr}"})
    for name, kept, total in (("stdout", ran.out, ran.out_bytes), ("stderr", ran.err, ran.err_bytes)):
        if total > len(kept):
            logs.append({"level": "warn", "message": f"{name} truncated: kept {len(kept)} of {total} bytes"})
    return logs


def failure(message: str, *, retry: bool, logs: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"status": "error", "error": message, "retry": retry,
            "logs": logs or [{"level": "error", "message": message}]}


def health(settings: Settings) -> dict[str, Any]:
    program = settings.command[0] if isinstance(settings.command, list) else settings.shell
    if shutil.which(program) is None:
        return failure(f"executable not found in PATH: {program}", retry=False)
    return {"status": "ok", "result": "sys_exec health check passed",
            "logs": [{"level": "info", "message": f"configured command: {settings.command}"}]}


def main() -> int:
    try:
        request = json.load(sys.stdin)
    except ValueError as exc:
        json.dump(failure(f"the request is not JSON: {exc}", retry=False), sys.stdout)
        return 0
    command = request.get("command") if isinstance(request, dict) else None
    config = request.get("config") if isinstance(request, dict) and isinstance(request.get("config"), dict) else {}
    if command not in ("poll", "handle", "health"):
        json.dump(failure(f"unknown command {command!r} (sys_exec answers poll, handle and health)", retry=False),
                  sys.stdout)
        return 0
    try:
        settings = Settings.read(config)
    except Refused as exc:
        print(f"sys_exec: {exc}", file=sys.stderr)
        json.dump(failure(str(exc), retry=False), sys.stdout)
        return 78  # a configuration error: the gateway never retries it (spec §5.7)
    json.dump(health(settings) if command == "health" else execute(request, settings), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
