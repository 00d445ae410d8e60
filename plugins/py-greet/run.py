#!/usr/bin/env python3
"""py-greet: greeting plugin with a durable snapshot (fact_outputs)."""
import json
import sys
from datetime import datetime, timezone


def snapshot(*, last_run, last_greeting):
    return {"last_run": last_run, "last_greeting": last_greeting}


def main():
    request = json.load(sys.stdin)
    config = request.get("config") or {}
    command = request.get("command")
    if command == "poll":
        greeting = f"{config.get('greeting', 'Hello')}, {config.get('name', 'World')}!"
        now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        response = {
            "status": "ok",
            "result": greeting,
            "state_updates": snapshot(last_run=now, last_greeting=greeting),
            "logs": [{"level": "info", "message": f"{greeting} (job {request.get('job_id')})"}],
        }
    elif command == "health":
        response = {"status": "ok", "result": "healthy", "logs": []}
    else:
        response = {"status": "error", "error": f"unknown command {command!r}", "retry": False, "logs": []}
    json.dump(response, sys.stdout)


if __name__ == "__main__":
    main()
