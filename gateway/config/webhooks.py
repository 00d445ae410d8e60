"""Webhook endpoints from `webhooks:` (spec 000 §10.1, "Webhooks", Configuration Specification §4.3).

The loader merges the bare-list form into `webhooks: {listen, endpoints}`; the schema
(config.schema.json) checks every key, type and pattern of it and refuses unknown keys;
`webhooks_config` types what passed (GatewayConfig.webhooks). What a schema cannot know is checked
by `serve_webhooks` as the runtime is built (gateway.runtime), with what the endpoints refer to as
plain data (the commands of each plugin, the secrets of tokens.yaml), so the config layer imports
nothing above it: a configured plugin, a declared command, a defined secret, one endpoint per path.
webhooks.yaml is a high-security file: an endpoint that cannot be served exactly as written (an
unknown key, plugin or command, a secret_ref tokens.yaml does not define, two endpoints on one
path) refuses the whole config, naming file, line and key, instead of leaving a hole in the listener.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.config.api import Listen, parse_listen
from gateway.config.yamlsrc import KeyPath, dotted

DEFAULT_COMMAND = "handle"
DEFAULT_MAX_BODY_SIZE = 1024 * 1024  # the spec's "1 MB", read as the original reads it: 1048576
_SIZE = re.compile(r"\s*(\d+)\s*([kmg]?b)?\s*", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}

Problem = Callable[[KeyPath, str], None]


@dataclass(frozen=True)
class WebhookEndpoint:
    """One entry of `webhooks.endpoints` as configured."""

    name: str
    path: str
    plugin: str
    command: str
    secret_ref: str
    signature_header: str
    max_body_size: int  # bytes


@dataclass(frozen=True)
class WebhooksConfig:
    listen: Listen | None = None  # where the listener serves; None when the config names none
    endpoints: tuple[WebhookEndpoint, ...] = ()


@dataclass(frozen=True)
class Endpoint(WebhookEndpoint):
    """An endpoint as the listener serves it: with the secret its secret_ref names. A type of its
    own, so nothing can verify a signature with an endpoint of the config, which has no secret."""

    secret: str = field(repr=False, kw_only=True)


# Plugin name -> the commands its manifest declares; None for a plugin skipped at load (no manifest
# to check a command against: the registry says why it was skipped).
Commands = Mapping[str, tuple[str, ...] | None]


@dataclass(frozen=True)
class Webhooks:
    listen: Listen | None = None  # where the listener serves; None when the config names none
    by_path: Mapping[str, Endpoint] = field(default_factory=lambda: MappingProxyType({}))


def parse_size(value: object) -> int:
    """Bytes in `1MB`, `512KB`, `64kb`, `2048B` or a bare byte count (units are binary, as the
    original's). Raises ValueError naming what was wrong."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (match := _SIZE.fullmatch(value)):
        size = int(match.group(1)) * _UNIT[(match.group(2) or "").lower()]
    else:
        raise ValueError(f"expected a size such as 1MB, 512KB or 1048576 (bytes), got {value!r}")
    if size <= 0:
        raise ValueError(f"size must be more than 0 bytes, got {value!r}")
    return size


def webhooks_config(raw: Mapping[str, Any]) -> WebhooksConfig:
    """`raw` is the merged `webhooks:` mapping, which the schema has passed, typed."""
    listen = parse_listen(raw["listen"], default_port=0) if "listen" in raw else None
    return WebhooksConfig(listen, tuple(_endpoint(entry) for entry in raw.get("endpoints") or ()))


def _endpoint(raw: Mapping[str, Any]) -> WebhookEndpoint:
    return WebhookEndpoint(
        name=raw.get("name", raw["path"]),
        path=raw["path"],
        plugin=raw["plugin"],
        command=raw.get("command", DEFAULT_COMMAND),
        secret_ref=raw["secret_ref"],
        signature_header=raw["signature_header"],
        max_body_size=parse_size(raw.get("max_body_size", DEFAULT_MAX_BODY_SIZE)),
    )


def serve_webhooks(
    config: WebhooksConfig,
    commands: Commands,
    secrets: Mapping[str, str],
    unset: Collection[str],
    problem: Problem,
) -> Webhooks:
    """The listener's endpoints by path, each with its secret. `commands` has every configured
    plugin; `unset` names the tokens.yaml entries whose key is empty. Refused through `problem`,
    all at once: a plugin that is not configured, a command its manifest does not declare, a
    secret_ref naming no secret, and a path or name an earlier endpoint already has."""
    by_path: dict[str, Endpoint] = {}
    first_use: dict[tuple[str, str], KeyPath] = {}  # ("path" or "name", value) -> its first endpoint
    for index, endpoint in enumerate(config.endpoints):
        at: KeyPath = ("webhooks", "endpoints", index)
        refused = _refusals(endpoint, commands, secrets, unset)
        for key, message in refused:
            problem((*at, key), message)
        if refused:
            continue
        # `/hook/a` and `/hook/a/` are one path to a sender (the original's conflict check trims
        # the trailing slash too): two endpoints on it would make the slash choose.
        same_path = endpoint.path.rstrip("/") or "/"
        for kind, value in (("path", same_path), ("name", endpoint.name)):
            if (kind, value) in first_use:
                shown = endpoint.path if kind == "path" else value
                problem((*at, kind), f"{kind} {shown!r} is already used by {dotted(first_use[kind, value])}")
                break
            first_use[kind, value] = at
        else:
            by_path[endpoint.path] = Endpoint(**vars(endpoint), secret=secrets[endpoint.secret_ref])
    return Webhooks(config.listen, MappingProxyType(by_path))


def _refusals(
    endpoint: WebhookEndpoint, commands: Commands, secrets: Mapping[str, str], unset: Collection[str]
) -> list[tuple[str, str]]:
    """What the endpoint refers to that does not exist, as (its key, why)."""
    found = []
    if endpoint.plugin not in commands:
        known = ", ".join(sorted(commands)) or "none"
        found.append(("plugin", f"unknown plugin {endpoint.plugin!r} (configured plugins: {known})"))
    elif (declared := commands[endpoint.plugin]) is not None and endpoint.command not in declared:
        what = f"plugin {endpoint.plugin!r} has no command {endpoint.command!r}"
        found.append(("command", f"{what} (manifest declares {', '.join(declared)})"))
    if endpoint.secret_ref not in secrets:
        ref = endpoint.secret_ref
        reason = "has an empty key (is its ${VAR} set?)" if ref in unset else "is not defined"
        found.append(("secret_ref", f"secret_ref {ref!r}: tokens.yaml entry {ref!r} {reason}"))
    return found
