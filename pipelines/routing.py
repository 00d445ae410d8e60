"""`routes:` (spec 000 §7: fan-out, exact match on event type) and the event envelope the core
stamps (§6.3: `source`, `timestamp`, `event_id`). Pure, no I/O; `pipelines.router` uses both."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RouteRule:
    source: str
    event_type: str
    target: str
    command: str = "handle"


@dataclass(frozen=True)
class RoutingTable:
    routes: tuple[RouteRule, ...] = ()
    _by_key: Mapping[tuple[str, str], tuple[RouteRule, ...]] = field(default_factory=dict, compare=False)

    @classmethod
    def compile(cls, routes: Iterable[RouteRule]) -> RoutingTable:
        ordered = tuple(routes)
        index: dict[tuple[str, str], list[RouteRule]] = {}
        for rule in ordered:
            index.setdefault((rule.source, rule.event_type), []).append(rule)
        return cls(ordered, {k: tuple(v) for k, v in index.items()})

    def match(self, source: str, event_type: str) -> tuple[RouteRule, ...]:
        return self._by_key.get((source, event_type), ())


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
