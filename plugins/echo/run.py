#!/usr/bin/env python3
"""echo: the smallest useful protocol-v2 plugin, and a liveness probe for the gateway.

config.mode forces the original's failure paths for test harnesses, on every command:
error (a permanent error), hang (never answers), protocol_error (answers broken JSON).
"""
import json
import sys
import time
from datetime import datetime, timezone

VERSION = "0.3.0"


def main():
    request = json.load(sys.stdin)
    command = request.get("command")
    payload = (request.get("event") or {}).get("payload") or {}
    config = request.get("config") or {}
    mode = config.get("mode") or ""
    if mode == "hang":
        time.sleep(999)
    if mode == "protocol_error":
        sys.stdout.write('{"status": "ok", "result": "cut short')
        return
    if command not in ("poll", "handle", "health"):
        response = {"status": "error", "error": f"unknown command {command!r}", "retry": False}
    elif mode == "error":
        error = "echo plugin forced error (mode=error)"
        response = {"status": "error", "error": error, "retry": False, "logs": [{"level": "error", "message": error}]}
    elif command == "health":
        response = {"status": "ok", "result": f"echo {VERSION} healthy"}
    else:
        message = payload.get("message") or payload.get("text") or config.get("message") or "hello from echo"
        response = {"status": "ok", "result": f"Echoed: {message}", "logs": [{"level": "info", "message": f"echoed {message!r}"}]}
        if command == "poll":
            now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
            response["events"] = [{"type": "echo.poll", "payload": {"message": message, "emitted_at": now}}]
    json.dump(response, sys.stdout)


if __name__ == "__main__":
    main()
