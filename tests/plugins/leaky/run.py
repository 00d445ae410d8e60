#!/usr/bin/env python3
"""leaky: repeats event.payload.say in every place a plugin's words reach a person: its stderr,
its error (mode fail, the default) or its result and an emitted event (mode ok)."""
import json
import sys


def main():
    request = json.load(sys.stdin)
    payload = (request.get("event") or {}).get("payload") or {}
    say = str(payload.get("say", ""))
    sys.stderr.write(f"connecting with {say}\n")
    sys.stderr.flush()
    if payload.get("mode", "fail") == "fail":
        response = {"status": "error", "error": f"{say}: login refused", "retry": False}
    else:
        event = {"type": payload.get("event_type") or "leaky.said", "payload": {"said": say}}
        response = {"status": "ok", "result": say, "events": [event]}
    sys.stdout.write(json.dumps(response))


if __name__ == "__main__":
    main()
