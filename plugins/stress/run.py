#!/usr/bin/env python3
"""stress: misbehaves on request. Knobs come from event.payload, then config."""
import json
import os
import signal
import subprocess
import sys
import time


def knob(request, name, default=None):
    payload = (request.get("event") or {}).get("payload") or {}
    if name in payload:
        return payload[name]
    return (request.get("config") or {}).get(name, default)


def emit(response):
    sys.stdout.write(json.dumps(response))
    sys.stdout.flush()


def main():
    request = json.load(sys.stdin)
    command = request.get("command")
    if command == "health":
        return emit({"status": "ok", "result": "healthy"})
    if command == "init":
        if (request.get("config") or {}).get("init_fails"):
            return emit({"status": "error", "error": "init refused by config.init_fails", "retry": False})
        return emit({"status": "ok", "result": "initialised"})
    if command == "state":
        count = int((request.get("state") or {}).get("count", 0)) + 1
        return emit({"status": "ok", "result": f"count={count}", "state_updates": {"count": count}})

    mode = knob(request, "mode", "ok")
    marker_dir = knob(request, "marker_dir")
    if marker_dir:  # lets tests count how often and how concurrently a job really ran
        with open(os.path.join(marker_dir, f"{request['job_id']}.{os.getpid()}.start"), "w") as fh:
            fh.write(str(time.time()))
    time.sleep(float(knob(request, "sleep", 0) or 0))

    if mode == "fail_until":  # fails until attempt file count reaches payload.succeed_on
        path = os.path.join(marker_dir, f"{request['job_id']}.attempts")
        n = (int(open(path).read()) if os.path.exists(path) else 0) + 1
        open(path, "w").write(str(n))
        if n < int(knob(request, "succeed_on", 2)):
            return emit({"status": "error", "error": f"transient failure {n}"})
        mode = "ok"
    if mode == "hang":
        time.sleep(3600)
    if mode == "term_trap_grandchild":
        code = "import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(3600)\n"
        child = subprocess.Popen([sys.executable, "-c", code])
        if marker_dir:
            with open(os.path.join(marker_dir, "grandchild.pid"), "w") as fh:
                fh.write(str(child.pid))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    if mode == "crash":
        sys.stderr.write("Traceback (most recent call last):\n  boom: simulated crash\n")
        os._exit(3)
    if mode == "killed":  # as a segfault or the OOM killer would end it
        sys.stderr.write("about to be killed\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "non_json":
        sys.stdout.write("this is not json\n")
        return None
    if mode == "empty":
        return None
    if mode == "big_stdout":
        chunk = "x" * 65536
        for _ in range(int(knob(request, "mib", 11)) * 16):
            sys.stdout.write(chunk)
        return None
    if mode == "big_stderr":
        sys.stderr.write("e" * (1024 * 1024))
        return emit({"status": "ok", "result": "wrote 1 MiB to stderr"})
    if mode == "exit78":
        sys.stderr.write("stress: configuration error\n")
        emit({"status": "error", "error": "bad configuration"})
        os._exit(78)
    if mode == "retry_false":
        return emit({"status": "error", "error": "permanent input error", "retry": False})
    if mode == "error":
        return emit({"status": "error", "error": "simulated failure",
                     "events": [{"type": "stress.never_routed", "payload": {}}]})
    if mode == "ok_no_result":
        return emit({"status": "ok"})
    if mode == "pretty":
        sys.stdout.write(json.dumps({"status": "ok", "result": "pretty \u00e9", "extra_key": 1}, indent=2,
                                    ensure_ascii=False))
        return None
    n = int(knob(request, "emit", 0) or 0)
    event_type = knob(request, "event_type", "stress.event")
    events = [{"type": event_type, "payload": {"index": i, "of": n}} for i in range(n)]
    event_key = knob(request, "event_dedupe_key")
    if event_key:
        for i, event in enumerate(events):
            event["dedupe_key"] = f"{event_key}:{i}"
    size = int(knob(request, "result_bytes", 0) or 0)
    result = "x" * size if size else f"ok after {knob(request, 'sleep', 0)}s"
    exit_code = int(knob(request, "exit_code", 0) or 0)
    response = {"status": "ok", "result": result, "events": events}
    subs = int(knob(request, "subs", 0) or 0)
    if subs:  # sub-spans plus junk entries the gateway must drop silently
        response["ductile_stopwatch_subs"] = [{"name": f"stress.s{i}", "dur_ns": i} for i in range(subs)] + [
            "junk", {"name": "no-duration"}]
    emit(response)
    if exit_code:
        os._exit(exit_code)
    return None


if __name__ == "__main__":
    main()
