"""Webhook endpoints from `webhooks:` (spec 000 §10.1, "Webhooks", Configuration Specification §4.3).

The loader merges the bare-list form into `webhooks: {listen, endpoints}`, so this reads one shape.
Parsed once per config load (gateway.runtime keeps the result); what an endpoint refers to comes in
as plain data, the commands of each plugin and the secrets of tokens.yaml, so the config layer
imports nothing above it.
webhooks.yaml is a high-security file: an endpoint that cannot be served exactly as written (an
unknown key, plugin or command, a secret_ref tokens.yaml does not define, two endpoints on one
path) refuses the whole config, naming file, line and key, instead of leaving a hole in the listener.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.config.api import Listen, parse_listen
from gateway.config.errors import ConfigProblem
from gateway.config.frozen import thaw
from gateway.config.model import GatewayConfig
from gateway.config.yamlsrc import KeyPath, dotted

DEFAULT_COMMAND = "handle"
DEFAULT_MAX_BODY_SIZE = 1024 * 1024  # the spec's "1 MB", read as the original reads it: 1048576
HEALTH_PATH = "/healthz"

_ENDPOINT_KEYS = ("name", "path", "plugin", "command", "secret_ref", "signature_header", "max_body_size")
_TOP_KEYS = ("listen", "endpoints")
_SIZE = re.compile(r"\s*(\d+)\s*([kmg]?b)?\s*", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
# Letters, digits and dashes: all a header name can hold once it has passed through gunicorn, which
# drops headers spelled with underscores.
_HEADER = re.compile(r"[A-Za-z0-9-]+")


@dataclass(frozen=True)
class Endpoint:
    name: str
    path: str
    plugin: str
    command: str
    secret_ref: str
    secret: str = field(repr=False)
    signature_header: str
    max_body_size: int


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


def parse_webhooks(
    config: GatewayConfig, commands: Commands, secrets: Mapping[str, str]
) -> tuple[Webhooks, list[ConfigProblem]]:
    """The configured listener and endpoints, and every problem with them."""
    return _Parser(config, commands, secrets).parse()


class _Parser:
    def __init__(self, config: GatewayConfig, commands: Commands, secrets: Mapping[str, str]):
        self.config = config
        self.commands = commands
        self.secrets = secrets
        self.problems: list[ConfigProblem] = []

    def problem(self, path: KeyPath, message: str) -> None:
        self.problems.append(self.config.problem(path, message))

    def parse(self) -> tuple[Webhooks, list[ConfigProblem]]:
        raw = thaw(self.config.webhooks) or {}
        self.unknown_keys(("webhooks",), raw, _TOP_KEYS)
        listen = None
        if raw.get("listen") is not None:
            listen = parse_listen(raw["listen"], default_port=0) if ":" in str(raw["listen"]) else None
            if listen is None:
                self.problem(
                    ("webhooks", "listen"), f"expected host:port such as 127.0.0.1:8081, got {raw['listen']!r}"
                )
        entries = raw.get("endpoints")
        if entries is None:
            entries = []
        elif not isinstance(entries, list):
            self.problem(("webhooks", "endpoints"), f"expected a list of endpoints, got {entries!r}")
            entries = []
        by_path: dict[str, Endpoint] = {}
        first_use: dict[tuple[str, str], KeyPath] = {}  # ("path" or "name", value) -> its first endpoint
        for index, entry in enumerate(entries):
            at: KeyPath = ("webhooks", "endpoints", index)
            endpoint = self.endpoint(at, entry)
            if endpoint is None:
                continue
            # `/hook/a` and `/hook/a/` are one path to a sender (the original's conflict check
            # trims the trailing slash too): two endpoints on it would make the slash choose.
            same_path = endpoint.path.rstrip("/") or "/"
            for kind, value in (("path", same_path), ("name", endpoint.name)):
                if (kind, value) in first_use:
                    other = dotted(first_use[kind, value])
                    shown = endpoint.path if kind == "path" else value
                    self.problem((*at, kind), f"{kind} {shown!r} is already used by {other}")
                    endpoint = None
                    break
                first_use[kind, value] = at
            if endpoint is not None:
                by_path[endpoint.path] = endpoint
        return Webhooks(listen, MappingProxyType(by_path)), self.problems

    def unknown_keys(self, at: KeyPath, raw: Mapping[str, Any], known: tuple[str, ...]) -> None:
        for key in raw:
            if key in known:
                continue
            if key == "secret":
                message = "an inline secret is not accepted: define it in tokens.yaml and name it in secret_ref"
            else:
                message = f"unknown key {key!r} (expected {', '.join(known)})"
            self.problem((*at, key), message)

    def endpoint(self, at: KeyPath, raw: Any) -> Endpoint | None:
        if not isinstance(raw, dict):
            self.problem(at, f"expected an endpoint mapping (path, plugin, secret_ref, ...), got {raw!r}")
            return None
        before = len(self.problems)
        self.unknown_keys(at, raw, _ENDPOINT_KEYS)
        path = self.path(at, raw.get("path"))
        plugin = self.plugin(at, raw.get("plugin"))
        command = self.command(at, plugin, raw.get("command") or DEFAULT_COMMAND)
        secret_ref, secret = self.secret(at, raw.get("secret_ref"))
        header = self.header(at, raw.get("signature_header"))
        size = DEFAULT_MAX_BODY_SIZE
        if "max_body_size" in raw:
            try:
                size = parse_size(raw["max_body_size"])
            except ValueError as exc:
                self.problem((*at, "max_body_size"), str(exc))
        name = raw.get("name", path)
        if "name" in raw and (not isinstance(name, str) or not name):
            self.problem((*at, "name"), f"expected a non-empty string, got {name!r}")
        if len(self.problems) > before:
            return None
        return Endpoint(name, path, plugin, command, secret_ref, secret, header, size)

    def required_string(self, at: KeyPath, key: str, value: Any, what: str) -> str:
        if value is None:
            self.problem((*at, key), f"missing required key {key!r} ({what})")
        elif not isinstance(value, str) or not value:
            self.problem((*at, key), f"expected {what}, got {value!r}")
        else:
            return value
        return ""

    def path(self, at: KeyPath, value: Any) -> str:
        path = self.required_string(at, "path", value, "the URL path, such as /webhook/github")
        if not path:
            return path
        if not path.startswith("/") or any(c in path for c in "?# "):
            self.problem((*at, "path"), f"expected a URL path such as /webhook/github (no ?, # or space), got {path!r}")
        elif path == HEALTH_PATH:
            self.problem((*at, "path"), f"{HEALTH_PATH} is the listener's health endpoint")
        return path

    def plugin(self, at: KeyPath, value: Any) -> str:
        plugin = self.required_string(at, "plugin", value, "the name of a configured plugin")
        if plugin and plugin not in self.config.plugins:
            known = ", ".join(sorted(self.config.plugins)) or "none"
            self.problem((*at, "plugin"), f"unknown plugin {plugin!r} (configured plugins: {known})")
        return plugin

    def command(self, at: KeyPath, plugin: str, value: Any) -> str:
        command = self.required_string(at, "command", value, "a command name")
        declared_commands = self.commands.get(plugin)
        if command and declared_commands is not None and command not in declared_commands:
            declared = ", ".join(declared_commands)
            self.problem(
                (*at, "command"), f"plugin {plugin!r} has no command {command!r} (manifest declares {declared})"
            )
        return command

    def secret(self, at: KeyPath, value: Any) -> tuple[str, str]:
        ref = self.required_string(at, "secret_ref", value, "the name of a tokens.yaml entry holding the HMAC secret")
        if not ref:
            return ref, ""
        secret = self.secrets.get(ref)
        if secret is None:
            defined = any(
                isinstance(t, Mapping) and t.get("name") == ref for t in self.config.document.get("tokens") or ()
            )
            reason = "has an empty key (is its ${VAR} set?)" if defined else "is not defined"
            self.problem((*at, "secret_ref"), f"secret_ref {ref!r}: tokens.yaml entry {ref!r} {reason}")
            return ref, ""
        return ref, secret

    def header(self, at: KeyPath, value: Any) -> str:
        header = self.required_string(at, "signature_header", value, "the request header carrying the signature")
        if header and not _HEADER.fullmatch(header):
            self.problem((*at, "signature_header"), f"expected a header name of letters, digits and -, got {header!r}")
        return header
