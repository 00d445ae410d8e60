#!/usr/bin/env python3
"""hostile: misbehaves as event.payload.mode says. Children it leaves write their pid to
payload.marker_dir/<name>.pid so tests can look for survivors."""
import json
import os
import sys
import time


def answer(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def note_pid(marker_dir, name, pid):
    if marker_dir:
        with open(os.path.join(marker_dir, f"{name}.pid.tmp"), "w") as fh:
            fh.write(str(pid))
        os.rename(os.path.join(marker_dir, f"{name}.pid.tmp"), os.path.join(marker_dir, f"{name}.pid"))


def leave_child(marker_dir, *, keep_stdout, setsid=False):
    """Fork a child that outlives this process by a minute."""
    pid = os.fork()
    if pid:
        return pid
    if setsid:
        os.setsid()
    if not keep_stdout:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    note_pid(marker_dir, "child", os.getpid())
    time.sleep(60)
    os._exit(0)


def main():
    request = json.load(sys.stdin)
    payload = (request.get("event") or {}).get("payload") or {}
    mode = payload.get("mode", "ok")
    marker_dir = payload.get("marker_dir")
    ok = json.dumps({"status": "ok", "result": f"{mode} done"})
    if mode == "deep_json":
        depth = int(payload.get("depth", 100000))
        return answer('{"status": "ok", "result": ' + "[" * depth + "]" * depth + "}")
    if mode == "unstorable":  # valid JSON that no database column can hold
        return answer('{"status": "ok", "result": "nul \\u0000 lone \\udc00"}')
    if mode == "nan":
        return answer('{"status": "ok", "result": NaN}')
    if mode == "long_event_type":  # longer than the event log's type column
        return answer(json.dumps({"status": "ok", "result": "x", "events": [{"type": "t" * 300, "payload": {}}]}))
    if mode == "bad_utf8":
        sys.stdout.buffer.write(b'{"status": "ok", "result": "caf\xe9 \xff\xfe"}')
        return None
    if mode == "junk":  # exactly payload.mib MiB that is not JSON
        size, chunk = int(payload.get("mib", 10) * 1024 * 1024), "not json " * 7000
        for _ in range(size // len(chunk)):
            sys.stdout.write(chunk)
        sys.stdout.write(chunk[: size % len(chunk)])
        return None
    if mode == "nul_stderr":  # stderr PostgreSQL's text columns cannot hold as it came
        sys.stderr.buffer.write(b"nul \x00 and \xff\n")
        sys.stderr.flush()
        return answer(ok)
    if mode in ("leave_child", "hold_stdout", "setsid_child", "setsid_holds_stdout"):
        leave_child(marker_dir, keep_stdout="hold" in mode, setsid=mode.startswith("setsid"))
        # The child has written its pid before the answer, so a test never races the fork.
        while marker_dir and not os.path.exists(os.path.join(marker_dir, "child.pid")):
            time.sleep(0.01)
        return answer(ok)
    if mode == "sleep":  # and a child in its process group, both for payload.seconds
        leave_child(marker_dir, keep_stdout=False)
        note_pid(marker_dir, "plugin", os.getpid())
        time.sleep(float(payload.get("seconds", 60)))
    return answer(ok)


if __name__ == "__main__":
    main()
