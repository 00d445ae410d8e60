"""The router: given a finished job's events, the child jobs to enqueue. Pure, no I/O.

Spec 000 §7 (routes: fan-out, exact match on event type, no match is not an error) and §6.3
(the core injects `source`, `timestamp` and `event_id` into each event). Pipelines compile into
the same table in their own issue; this module is the seam.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import blake3


@dataclass(frozen=True)
class RouteRule:
    source: str
    event_type: str
    target: str
    command: str = "handle"


@dataclass(frozen=True)
class Dispatch:
    """One child job the router asks for."""

    plugin: str
    command: str
    event: Mapping[str, Any]
    dedupe_key: str | None
    rule: RouteRule


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

    def fingerprint(self) -> str:
        body = json.dumps([r.__dict__ for r in self.routes], sort_keys=True)
        return blake3.blake3(body.encode()).hexdigest()

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


def route(
    table: RoutingTable, source: str, events: Iterable[Mapping[str, Any]], new_id: Callable[[], str], timestamp: str
) -> tuple[list[dict[str, Any]], list[Dispatch]]:
    """Stamp `events` emitted by plugin `source` and fan each out to every matching route."""
    stamped: list[dict[str, Any]] = []
    dispatches: list[Dispatch] = []
    for raw in events:
        event = stamp_event(raw, source=source, timestamp=timestamp, event_id=new_id())
        stamped.append(event)
        for rule in table.match(source, event["type"]):
            child_event = {**event, "payload": {**event["payload"]}}
            # Published plugins read where an event came from (the original's contract).
            child_event["payload"].setdefault("ductile_upstream_plugin", source)
            dispatches.append(Dispatch(rule.target, rule.command, child_event, event.get("dedupe_key"), rule))
    return stamped, dispatches


def valid_event(raw: Any) -> str | None:
    """Why `raw` is not an event envelope, or None when it is one."""
    if not isinstance(raw, dict):
        return "event is not an object"
    if not isinstance(raw.get("type"), str) or not raw["type"]:
        return "event has no string `type`"
    return None
