#!/usr/bin/env python3
"""intruder: tries what payload.try names, and answers ok with what happened (`did`), so a test
asserts what the sandbox let through; the resource attempts (allocate, fork, burn) fail the job
the way the limit makes them fail."""
import json
import os
import signal
import socket
import sys
import time
import urllib.request


def attempt(payload):
    what = payload["try"]
    if what == "connect":  # a raw TCP connection, ignoring any proxy
        with socket.create_connection((payload["host"], payload["port"]), timeout=3) as conn:
            return conn.recv(100).decode()
    if what == "fetch":  # HTTP as a well-behaved client does it: through HTTP(S)_PROXY when set
        with urllib.request.urlopen(payload["url"], timeout=5) as answer:
            return answer.read().decode()
    if what == "fetch_each":
        return [tried({"try": "fetch", "url": url}) for url in payload["urls"]]
    if what == "write":
        with open(payload["path"], "w") as fh:
            fh.write("intruder was here")
        return "written"
    if what == "read":
        with open(payload["path"]) as fh:
            return fh.read()
    if what == "processes":  # the pids this process can see
        return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    if what == "signal":
        os.kill(payload["pid"], signal.SIGTERM)
        return "signalled"
    if what == "allocate":
        block = bytearray(payload["mb"] * 1024 * 1024)
        return f"allocated {len(block)}"
    if what == "fork":
        children = []
        for _ in range(payload["count"]):
            pid = os.fork()
            if pid == 0:
                time.sleep(5)
                os._exit(0)
            children.append(pid)
        return f"forked {len(children)}"
    if what == "burn":
        while True:
            pass
    if what == "linger":  # a child in a session of its own that tries to outlive the job
        pid = os.fork()
        if pid == 0:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            with open(payload["pidfile"], "w") as fh:
                fh.write(str(os.getpid()))
            time.sleep(payload.get("seconds", 60))
            os._exit(0)
        time.sleep(payload.get("hold", 0))
        return f"left {pid}"
    raise SystemExit(f"unknown try {what!r}")


def tried(payload):
    try:
        return attempt(payload)
    except OSError as exc:
        return f"refused: {exc}"


def main():
    request = json.load(sys.stdin)
    payload = (request.get("event") or {}).get("payload") or {}
    did = tried(payload)
    sys.stdout.write(json.dumps({"status": "ok", "result": {"did": did, "uid": os.getuid()}}))


if __name__ == "__main__":
    main()
