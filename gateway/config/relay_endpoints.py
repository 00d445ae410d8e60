"""Remote Event Relay (spec 000 "Remote Event Relay", Configuration Specification §4.6 and §4.7):
`instances:` (relay-instances.yaml), the named remote gateways a `relay:` step sends to, and
`remote_ingress:` (relay-ingress.yaml), the peers whose events this gateway accepts.

Parsed once per config load, like webhooks.yaml (gateway/config/webhooks.py): the secrets come in
as plain data from tokens.yaml, and what cannot work as written (a `secret_ref` tokens.yaml does not
define, a base_url that is not absolute http(s), a name used twice) refuses the config naming file,
line and key. The schema (config.schema.json) has already checked the types; unknown keys warn.
`enabled` defaults to true: an entry is written to be used.

A peer signs under one key id at a time (`key_id`, `secret_ref`), as in the original. During a
rotation the receiver accepts more beside it, each a key id with its own secret:

```yaml
peers:
  - name: home-primary
    key_id: v2
    secret_ref: relay-lab-v2
    keys:                 # also accepted, until the peer has moved to key_id v2
      - {key_id: v1, secret_ref: relay-lab-v1}
```

The receiver adds the new key first, the sender moves to it, the old one goes: no event is refused
on the way (and one that is, by a sender that moved first, is retried: gateway/relay/sender.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from gateway.config.durations import parse_duration
from gateway.config.errors import ConfigProblem
from gateway.config.frozen import thaw
from gateway.config.model import GatewayConfig
from gateway.config.webhooks import DEFAULT_MAX_BODY_SIZE, parse_size
from gateway.config.yamlsrc import KeyPath, dotted

DEFAULT_LISTEN_PATH = "/ingest/peer"
DEFAULT_CLOCK_SKEW = 300.0
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class RelayInstance:
    """A remote gateway this one sends to."""

    name: str
    base_url: str  # without a trailing slash
    ingress_path: str
    secret: str = field(repr=False)
    key_id: str
    timeout: float
    allow: frozenset[str]  # event types it may be sent; empty: any

    @property
    def url(self) -> str:
        return self.base_url + self.ingress_path


@dataclass(frozen=True)
class RelayPeer:
    """A remote gateway this one accepts events from."""

    name: str
    secret: str = field(repr=False)
    accept: frozenset[str]  # event types it may send; empty: any
    baggage_allow: frozenset[str]  # baggage keys that may seed the local root context
    # Key id -> secret, for every key id the peer may sign under: its `key_id`, and during a
    # rotation those `keys` lists. Empty: the peer has no key id, and `secret` signs under any.
    keys: Mapping[str, str] = field(default_factory=dict, repr=False)

    def secret_for(self, key_id: str) -> str | None:
        """The secret a request presenting `key_id` must be signed with; None when the peer has no
        such key (the original's "relay key id mismatch")."""
        return self.keys.get(key_id) if self.keys else self.secret


@dataclass(frozen=True)
class RelayIngress:
    listen_path: str
    max_body_size: int
    allowed_clock_skew: float
    require_key_id: bool
    peers: Mapping[str, RelayPeer]


@dataclass(frozen=True)
class Relay:
    instances: Mapping[str, RelayInstance]
    ingress: RelayIngress | None = None  # None: this gateway accepts no relayed events


def parse_relay(config: GatewayConfig, secrets: Mapping[str, str]) -> tuple[Relay, list[ConfigProblem]]:
    """The enabled instances and the ingress, and every problem with them."""
    parser = _Parser(config, secrets)
    document = thaw(config.document)
    instances = parser.instances(document.get("instances") or [])
    ingress = parser.ingress(document["remote_ingress"]) if document.get("remote_ingress") is not None else None
    return Relay(MappingProxyType(instances), ingress), parser.problems


class _Parser:
    def __init__(self, config: GatewayConfig, secrets: Mapping[str, str]):
        self.config, self.secrets = config, secrets
        self.problems: list[ConfigProblem] = []

    def problem(self, path: KeyPath, message: str) -> None:
        self.problems.append(self.config.problem(path, message))

    def instances(self, entries: Sequence[Mapping[str, Any]]) -> dict[str, RelayInstance]:
        found: dict[str, RelayInstance] = {}
        for index, name, raw in self.named(("instances",), entries):
            at: KeyPath = ("instances", index)
            base_url = str(raw["base_url"]).strip().rstrip("/")
            parts = urlsplit(base_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                self.problem((*at, "base_url"), f"expected an absolute http(s) URL, got {raw['base_url']!r}")
            path = str(raw["ingress_path"]).strip()
            if not path.startswith("/"):
                self.problem((*at, "ingress_path"), f"expected a path starting with /, got {path!r}")
            timeout = self.duration((*at, "timeout"), raw.get("timeout"), DEFAULT_TIMEOUT)
            secret = self.secret(at, raw["secret_ref"])
            if raw.get("enabled", True):
                found[name] = RelayInstance(
                    name, base_url, path, secret, str(raw.get("key_id") or "").strip(), timeout, _set(raw, "allow")
                )
        return found

    def ingress(self, raw: Mapping[str, Any]) -> RelayIngress:
        at: KeyPath = ("remote_ingress",)
        listen_path = str(raw.get("listen_path") or DEFAULT_LISTEN_PATH).strip()
        if not listen_path.startswith("/") or listen_path == "/":
            self.problem((*at, "listen_path"), f"expected a path such as {DEFAULT_LISTEN_PATH}, got {listen_path!r}")
        size = DEFAULT_MAX_BODY_SIZE
        if raw.get("max_body_size") is not None:
            try:
                size = parse_size(raw["max_body_size"])
            except ValueError as exc:
                self.problem((*at, "max_body_size"), str(exc))
        skew = self.duration((*at, "allowed_clock_skew"), raw.get("allowed_clock_skew"), DEFAULT_CLOCK_SKEW)
        peers: dict[str, RelayPeer] = {}
        for index, name, peer in self.named((*at, "peers"), raw.get("peers") or []):
            secret = self.secret((*at, "peers", index), peer["secret_ref"])
            keys = self.keys((*at, "peers", index), peer, secret)
            if peer.get("enabled", True):
                allow = frozenset(k.strip() for k in (peer.get("baggage") or {}).get("allow") or () if k.strip())
                peers[name] = RelayPeer(name, secret, _set(peer, "accept"), allow, MappingProxyType(keys))
        return RelayIngress(
            listen_path.rstrip("/"), size, skew, bool(raw.get("require_key_id", False)), MappingProxyType(peers)
        )

    def keys(self, at: KeyPath, peer: Mapping[str, Any], secret: str) -> dict[str, str]:
        """Every key id `peer` may sign under, with its secret: its own `key_id`, then `keys`."""
        key_id = str(peer.get("key_id") or "").strip()
        keys = {key_id: secret} if key_id else {}
        extra = peer.get("keys") or []
        if extra and not key_id:
            message = "keys: the peer's own key_id must be set too (a request's key id picks its secret)"
            self.problem((*at, "keys"), message)
        first: dict[str, KeyPath] = {key_id: (*at, "key_id")}
        for index, raw in enumerate(extra):
            where: KeyPath = (*at, "keys", index)
            other = str(raw["key_id"]).strip()
            if not other:
                self.problem((*where, "key_id"), "expected a key id such as v1")
            elif other in first:
                self.problem((*where, "key_id"), f"key id {other!r} is already used by {dotted(first[other])}")
            else:
                first[other] = (*where, "key_id")
                keys[other] = self.secret(where, raw["secret_ref"])
        return keys

    def named(self, at: KeyPath, entries: Sequence[Mapping[str, Any]]) -> list[tuple[int, str, Mapping[str, Any]]]:
        """Entries with a usable, unique name (a URL path segment: no `/`, no space)."""
        out: list[tuple[int, str, Mapping[str, Any]]] = []
        first: dict[str, int] = {}
        for index, raw in enumerate(entries):
            name = str(raw["name"]).strip()
            if not name or any(c in name for c in "/?# \t"):
                message = f"expected a name such as home-primary (no /, ?, # or space), got {name!r}"
                self.problem((*at, index, "name"), message)
            elif name in first:
                self.problem((*at, index, "name"), f"name {name!r} is already used by {dotted((*at, first[name]))}")
            else:
                first[name] = index
                out.append((index, name, raw))
        return out

    def duration(self, path: KeyPath, value: Any, default: float) -> float:
        if value is None:
            return default
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.problem(path, str(exc))
            return default
        if seconds <= 0:
            self.problem(path, f"must be more than 0, got {value!r}")
            return default
        return seconds

    def secret(self, at: KeyPath, ref: str) -> str:
        secret = self.secrets.get(ref)
        if secret is None:
            self.problem((*at, "secret_ref"), f"secret_ref {ref!r}: tokens.yaml defines no entry {ref!r} with a key")
            return ""
        return secret


def _set(raw: Mapping[str, Any], key: str) -> frozenset[str]:
    return frozenset(str(v).strip() for v in raw.get(key) or () if str(v).strip())
