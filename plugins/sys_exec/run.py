#!/usr/bin/env python3
"""sys_exec: run a configured command. The command comes from operator config, never from payloads."""
import json
import os
import subprocess
import sys
import time

CAP = 64 * 1024


def tail(data):
    text = data.decode("utf-8", "replace")
    return text[-CAP:]


def run(request):
    config = request.get("config") or {}
    command = config.get("command")
    cwd = os.path.expanduser(config.get("working_dir") or os.getcwd())
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (config.get("env") or {}).items()})
    env["DUCTILE_PAYLOAD"] = json.dumps(((request.get("event") or {}).get("payload")) or {})
    env["DUCTILE_JOB_ID"] = str(request.get("job_id", ""))
    started = time.perf_counter_ns()
    proc = subprocess.run(
        [config.get("shell") or "/bin/sh", "-c", command], cwd=cwd, env=env, capture_output=True, check=False
    )
    duration = time.perf_counter_ns() - started
    payload = {"command": command, "exit_code": proc.returncode, "stdout": tail(proc.stdout), "stderr": tail(proc.stderr)}
    subs = [{"name": "sys_exec.command", "dur_ns": duration, "status": "ok" if proc.returncode == 0 else "err"}]
    if proc.returncode != 0 and config.get("fail_on_nonzero", True):
        return {
            "status": "error",
            "error": f"command exited {proc.returncode}: {payload['stderr'].strip()[-500:]}",
            "events": [{"type": "sys_exec.completed", "payload": payload}],
            "ductile_stopwatch_subs": subs,
        }
    return {
        "status": "ok",
        "result": payload["stdout"].strip()[-2000:] or f"exit {proc.returncode}",
        "events": [{"type": "sys_exec.completed", "payload": payload}],
        "ductile_stopwatch_subs": subs,
    }


def main():
    request = json.load(sys.stdin)
    command = request.get("command")
    config = request.get("config") or {}
    if command in ("poll", "handle"):
        if not config.get("command"):
            print("sys_exec: config.command is required", file=sys.stderr)
            json.dump({"status": "error", "error": "config.command is required", "retry": False}, sys.stdout)
            sys.exit(78)
        response = run(request)
    elif command == "health":
        cwd = os.path.expanduser(config.get("working_dir") or os.getcwd())
        ok = bool(config.get("command")) and os.path.isdir(cwd)
        response = {"status": "ok", "result": "healthy"} if ok else {
            "status": "error", "error": "command missing or working_dir not a directory", "retry": False}
    else:
        response = {"status": "error", "error": f"unknown command {command!r}", "retry": False}
    json.dump(response, sys.stdout)


if __name__ == "__main__":
    main()
