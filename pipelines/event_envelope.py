"""The event envelope the core stamps on what a plugin emits (spec 000 §6.3: `source`,
`timestamp`, `event_id`), and what makes a plugin's output an event at all. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def stamp_event(raw: Mapping[str, Any], *, source: str, timestamp: str, event_id: str) -> dict[str, Any]:
    """The event envelope as it is stored and delivered: the plugin's fields plus the core's."""
    payload = raw.get("payload")
    event: dict[str, Any] = {
        "type": raw["type"],
        "payload": payload if isinstance(payload, dict) else ({} if payload is None else {"value": payload}),
        "source": source,
        "timestamp": timestamp,
        "event_id": event_id,
    }
    if raw.get("dedupe_key"):
        event["dedupe_key"] = str(raw["dedupe_key"])
    return event


def valid_event(raw: Any) -> str | None:
    """Why `raw` is not an event envelope, or None when it is one."""
    if not isinstance(raw, dict):
        return "event is not an object"
    if not isinstance(raw.get("type"), str) or not raw["type"]:
        return "event has no string `type`"
    return None
