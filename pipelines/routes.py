"""`routes:` (spec 000 §7: fan-out, exact match on event type), compiled into a table the
successors (`pipelines.successors`) look up by source plugin and event type. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


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
