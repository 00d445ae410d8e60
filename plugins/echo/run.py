#!/usr/bin/env python3
"""echo: the smallest useful protocol-v2 plugin."""
import json
import sys
from datetime import datetime, timezone

VERSION = "0.2.0"


def main():
    request = json.load(sys.stdin)
    command = request.get("command")
    payload = (request.get("event") or {}).get("payload") or {}
    config = request.get("config") or {}
    message = payload.get("message") or payload.get("text") or config.get("message") or "hello from echo"
    if command == "poll":
        now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        response = {
            "status": "ok",
            "result": f"Echoed: {message}",
            "events": [{"type": "echo.poll", "payload": {"message": message, "emitted_at": now}}],
            "logs": [{"level": "info", "message": f"echoed {message!r}"}],
        }
    elif command == "handle":
        response = {"status": "ok", "result": f"Echoed: {message}", "logs": [{"level": "info", "message": "handled"}]}
    elif command == "health":
        response = {"status": "ok", "result": f"echo {VERSION} healthy"}
    else:
        response = {"status": "error", "error": f"unknown command {command!r}", "retry": False}
    json.dump(response, sys.stdout)


if __name__ == "__main__":
    main()
