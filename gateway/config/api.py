"""`api:` as typed values (spec 000 §9, Configuration Reference "api"), built once by the config
loader with every default here: no consumer reads the mapping or repeats a default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.durations import parse_duration

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 8080
DEFAULT_MAX_CONCURRENT_SYNC = 10
# Open event streams (/events, the dashboard's) on this host's API, and for one token or console
# user (gateway/http/streamseats.py). A stream costs no thread (gateway/http/frontdoor.py), only a
# socket and its share of the process's polls: 200 open streams were measured within the API's
# latency targets (docs/performance.md).
DEFAULT_MAX_STREAMS = 512
DEFAULT_MAX_STREAMS_PER_TOKEN = 64


@dataclass(frozen=True)
class Listen:
    """A `host:port` to serve on; a bare host takes the default port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_listen(value: str, default_port: int) -> Listen:
    """`host:port`, or a bare host on `default_port`: the schema has checked the shape and the port."""
    host, colon, port = value.strip().rpartition(":")
    return Listen(host, int(port)) if colon else Listen(port, default_port)


@dataclass(frozen=True)
class InlineToken:
    """One entry of `api.auth.tokens` (the config's own tokens; tokens.yaml holds the rest)."""

    name: str
    token: str = field(repr=False)
    scopes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApiConfig:
    enabled: bool = True
    listen: Listen = Listen(DEFAULT_HOST, DEFAULT_PORT)
    max_concurrent_sync: int = DEFAULT_MAX_CONCURRENT_SYNC
    max_sync_timeout: float | None = None  # seconds; None: each pipeline's own timeout
    tokens: tuple[InlineToken, ...] = ()
    max_streams: int = DEFAULT_MAX_STREAMS
    max_streams_per_token: int = DEFAULT_MAX_STREAMS_PER_TOKEN
    # Browser origins (`https://app.example:8443`) whose pages may call the API (gateway/http/cors.py).
    allowed_origins: frozenset[str] = frozenset()


def api_config(raw: Mapping[str, Any]) -> ApiConfig:
    """`raw` is the merged `api:` mapping, which the schema (config.schema.json) has passed: every
    key, type, range and pattern is checked there and refused with its file, line and key."""
    auth = raw.get("auth") or {}
    return ApiConfig(
        enabled=raw.get("enabled", True),
        listen=parse_listen(raw["listen"], DEFAULT_PORT) if "listen" in raw else ApiConfig.listen,
        max_concurrent_sync=raw.get("max_concurrent_sync", DEFAULT_MAX_CONCURRENT_SYNC),
        max_sync_timeout=parse_duration(raw["max_sync_timeout"]) if "max_sync_timeout" in raw else None,
        tokens=tuple(_inline_token(index, entry) for index, entry in enumerate(auth.get("tokens") or ())),
        max_streams=raw.get("max_streams", DEFAULT_MAX_STREAMS),
        max_streams_per_token=raw.get("max_streams_per_token", DEFAULT_MAX_STREAMS_PER_TOKEN),
        # Compared with a request's `Origin` as written, as the original compares them; empty
        # entries are ignored, as there.
        allowed_origins=frozenset(
            origin.strip() for origin in raw.get("allowed_origins") or () if origin and origin.strip()
        ),
    )


def _inline_token(index: int, entry: Mapping[str, Any]) -> InlineToken:
    # An empty token (an unset `${VAR}`) is kept: the token registry refuses it, naming it.
    name = entry.get("name") or f"api.auth.tokens[{index}]"
    return InlineToken(name, str(entry.get("token") or ""), tuple(entry.get("scopes") or ()))
