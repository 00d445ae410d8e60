#!/usr/bin/env python3
"""template: the starting point for a Ductile plugin (protocol v2). README.md walks through it.

Copy this directory, rename it and `name:` in manifest.yaml, then replace poll() and handle()
with your plugin's work. One process per invocation: the gateway writes one JSON request on
stdin and reads one JSON response on stdout; anything on stderr is kept in the job's log.
Standard library only, so it runs with whatever `python3` the gateway's PATH finds.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# Sub-span timing (spec "Stopwatch"): `_stopwatch.py` beside this file wins (copy it in when your
# plugin leaves the bundled plugins directory), else the bundled plugins/_lib/ one. Without either
# the plugin works the same and reports no sub-spans.
sys.path.append(str(Path(__file__).resolve().parent.parent / "_lib"))
try:
    from _stopwatch import Spans
except ImportError:
    Spans = None

VERSION = "0.1.0"
DEFAULT_GREETING = "Hello"


class Refused(Exception):
    """A request this plugin can never satisfy (bad config, missing input): failed, not retried."""


class NoSpans:
    """Stands in for _stopwatch.Spans when the helper is absent: times nothing, reports nothing."""

    def time(self, name: str, **extra: Any) -> NoSpans:
        return self

    def annotate(self, **fields: Any) -> None:
        pass

    def __enter__(self) -> NoSpans:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def to_response_key(self) -> list[dict[str, Any]]:
        return []


def greeting_from(config: dict[str, Any]) -> str:
    greeting = config.get("greeting", DEFAULT_GREETING)
    if not isinstance(greeting, str) or not greeting.strip():
        raise Refused(f"config.greeting must be a non-empty string, got {greeting!r}")
    return greeting.strip()


def snapshot(*, count: int, last_run: str) -> dict[str, Any]:
    """What poll remembers: the whole object, with the same keys every time (spec "plugin facts")."""
    return {"count": count, "last_run": last_run}


def poll(request: dict[str, Any], spans: Any) -> dict[str, Any]:
    """Scheduled work: read the last snapshot from request.state, record the next one, emit an event."""
    greeting = greeting_from(request["config"])
    with spans.time("template.count") as span:
        count = int(request["state"].get("count", 0)) + 1
        span.annotate(count=count)
    now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    return {
        "status": "ok",
        "result": f"poll #{count}",
        # The dedupe_key makes a retried poll's event start its pipeline once, not twice.
        "events": [
            {"type": "template.ticked", "payload": {"count": count, "greeting": greeting},
             "dedupe_key": f"template:tick:{count}"}
        ],
        "state_updates": snapshot(count=count, last_run=now),
        "logs": [{"level": "info", "message": f"poll #{count}"}],
    }


def handle(request: dict[str, Any], spans: Any) -> dict[str, Any]:
    """Event-driven work: read the triggering event's payload, answer, emit the next event."""
    greeting = greeting_from(request["config"])
    payload = request["event"].get("payload") or {}
    # The step's own input first, the pipeline's accumulated baggage second (spec 000 §7.5).
    name = payload.get("name") or request["context"].get("name")
    if not name:
        raise Refused("payload.name is required (or `name` in the pipeline's baggage)")
    with spans.time("template.greet"):
        message = f"{greeting}, {name}!"
    return {
        "status": "ok",
        "result": message,
        "events": [{"type": "template.greeted", "payload": {"name": name, "message": message}}],
        "logs": [{"level": "info", "message": message}],
    }


def health(request: dict[str, Any], spans: Any) -> dict[str, Any]:
    """Can this plugin work with this config? Never state_updates here (spec "Quick Quality Checklist")."""
    greeting_from(request["config"])
    return {"status": "ok", "result": f"template {VERSION} healthy"}


# init runs when the gateway first meets this instance or its code or config changes; `plugin list`
# shows its answer as the instance's health. Here it checks what health checks.
COMMANDS = {"poll": poll, "handle": handle, "health": health, "init": health}


def error(message: str) -> dict[str, Any]:
    # retry: false says "the same request will fail the same way". Leave it out (or true) for a
    # failure worth retrying: a timeout, a 5xx, a peer that is down.
    return {"status": "error", "error": message, "retry": False, "logs": [{"level": "error", "message": message}]}


def respond(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        return error("the request must be a JSON object")
    command = request.get("command")
    handler = COMMANDS.get(command)
    if handler is None:
        return error(f"unknown command {command!r} (template answers {', '.join(COMMANDS)})")
    # The gateway always sends these as objects; a request typed by hand may leave them out.
    for key in ("config", "state", "context", "event"):
        if not isinstance(request.get(key), dict):
            request[key] = {}
    spans = Spans() if Spans is not None else NoSpans()
    try:
        response = handler(request, spans)
    except Refused as exc:
        return error(str(exc))
    subs = spans.to_response_key()
    if subs:
        response["ductile_stopwatch_subs"] = subs
    return response


def main() -> None:
    try:
        request = json.load(sys.stdin)
    except ValueError as exc:
        response = error(f"the request is not JSON: {exc}")
    else:
        response = respond(request)
    # One JSON document on stdout and nothing else: print debugging goes to stderr.
    json.dump(response, sys.stdout)


if __name__ == "__main__":
    main()
