"""`api:` as typed values (spec 000 §9, Configuration Reference "api"), built once by the config
loader with every default here: no consumer reads the mapping or repeats a default."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.durations import parse_duration
from gateway.config.yamlsrc import KeyPath

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 8080
DEFAULT_MAX_CONCURRENT_SYNC = 10
# Open event streams (/events, the dashboard's) on this host's API, and for one token or console
# user (gateway/http/streamseats.py). A stream costs no thread (gateway/http/frontdoor.py), only a
# socket and its share of the process's polls: 200 open streams were measured within the API's
# latency targets (docs/performance.md).
DEFAULT_MAX_STREAMS = 512
DEFAULT_MAX_STREAMS_PER_TOKEN = 64
_LISTEN = re.compile(r"(?P<host>\S+):(?P<port>\d{1,5})")

Problem = Callable[[KeyPath, str], None]


@dataclass(frozen=True)
class Listen:
    """A `host:port` to serve on; a bare host takes the default port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_listen(value: Any, default_port: int) -> Listen | None:
    """`host:port` or a bare host; None when `value` is neither (the caller names the key)."""
    text = str(value).strip()
    if match := _LISTEN.fullmatch(text):
        port = int(match.group("port"))
        return Listen(match.group("host"), port) if 0 < port < 65536 else None
    return Listen(text, default_port) if text and ":" not in text and not text.isspace() else None


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


def api_config(raw: Mapping[str, Any], problem: Problem) -> ApiConfig:
    """`raw` is the merged `api:` mapping; each problem names its key through `problem`."""
    base = ApiConfig()
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        problem(("api", "enabled"), f"expected true or false, got {enabled!r}")
        enabled = True
    listen = base.listen
    if raw.get("listen") is not None:
        parsed = parse_listen(raw["listen"], DEFAULT_PORT)
        if parsed is None:
            problem(("api", "listen"), f"expected host:port such as 127.0.0.1:8080, got {raw['listen']!r}")
        else:
            listen = parsed
    timeout = None
    if raw.get("max_sync_timeout") not in (None, ""):
        try:
            timeout = parse_duration(raw["max_sync_timeout"])
        except ValueError as exc:
            problem(("api", "max_sync_timeout"), str(exc))
    return ApiConfig(
        enabled=enabled,
        listen=listen,
        max_concurrent_sync=_at_least_one(raw, "max_concurrent_sync", base.max_concurrent_sync, problem),
        max_sync_timeout=timeout,
        tokens=_inline_tokens(raw, problem),
        max_streams=_at_least_one(raw, "max_streams", base.max_streams, problem),
        max_streams_per_token=_at_least_one(raw, "max_streams_per_token", base.max_streams_per_token, problem),
        allowed_origins=_origins(raw, problem),
    )


# What a browser sends as `Origin`: scheme, host and an optional port, nothing after.
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#\s]+")


def _origins(raw: Mapping[str, Any], problem: Problem) -> frozenset[str]:
    """`api.allowed_origins`, each compared with a request's `Origin` as it is, as the original
    compares them; empty entries are ignored, as there. One with a path, a trailing slash or no
    scheme could never match a browser's `Origin`, so it is refused with how to write it."""
    entries = raw.get("allowed_origins")
    if entries is None:
        return frozenset()
    if not isinstance(entries, list):
        problem(("api", "allowed_origins"), f"expected a list of origins, got {entries!r}")
        return frozenset()
    origins = set()
    for index, entry in enumerate(entries):
        text = str(entry).strip() if entry is not None else ""
        if not text:
            continue
        if text != "null" and not _ORIGIN.fullmatch(text):
            problem(
                ("api", "allowed_origins", index),
                f"expected an origin as a browser sends it, such as https://app.example.com or "
                f"http://localhost:5173 (scheme, host, optional port; no path or trailing slash), got {entry!r}",
            )
            continue
        origins.add(text)
    return frozenset(origins)


def _at_least_one(raw: Mapping[str, Any], key: str, default: int, problem: Problem) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problem(("api", key), f"expected a whole number of at least 1, got {value!r}")
        return default
    return value


def _inline_tokens(raw: Mapping[str, Any], problem: Problem) -> tuple[InlineToken, ...]:
    auth = raw.get("auth") or {}
    entries = auth.get("tokens") if isinstance(auth, Mapping) else None
    if entries is None:
        return ()
    if not isinstance(entries, list):
        problem(("api", "auth", "tokens"), f"expected a list of tokens, got {entries!r}")
        return ()
    tokens = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            problem(("api", "auth", "tokens", index), f"expected a mapping with token and scopes, got {entry!r}")
            continue
        scopes = entry.get("scopes") or []
        if not isinstance(scopes, list):
            problem(("api", "auth", "tokens", index, "scopes"), f"expected a list of scopes, got {scopes!r}")
            scopes = []
        name = str(entry.get("name") or f"api.auth.tokens[{index}]")
        tokens.append(InlineToken(name, str(entry.get("token") or ""), tuple(str(s) for s in scopes)))
    return tuple(tokens)
