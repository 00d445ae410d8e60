"""The config as `GET /config/view` shows it (spec 000 "API Reference" §12): secrets redacted.
Pure, no I/O.

A key whose name looks secret-like has its value, whatever its shape, replaced by `[REDACTED]`
at any depth. API token values are omitted (name and scopes shown); `tokens.yaml` keys are
omitted. Names the operator chose (plugin names, pipeline names) are not field names: `keycloak`
is a plugin, not a key, so only the values under such names are judged.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gateway.config.frozen import thaw

REDACTED = "[REDACTED]"
SECRET_WORDS = ("secret", "key", "token", "password", "passwd", "credential", "auth", "private")

KeyPath = tuple[str, ...]

# Mappings of the config document keyed by names, not fields (list positions are not in paths).
CONFIG_NAME_MAPS: frozenset[KeyPath] = frozenset({("plugins",)})


def is_secret_key(name: object) -> bool:
    lowered = str(name).lower()
    return any(word in lowered for word in SECRET_WORDS)


def redact(value: Any, *, name_maps: Collection[KeyPath] = (), hidden: set[str] | None = None) -> Any:
    """A plain copy of `value` with every secret-like key's value replaced by REDACTED.

    A whole subtree goes, not just its leaves: under `credentials:` even `user:` may be the secret.
    `name_maps` are the paths of mappings whose keys are names (their values are still judged).
    `hidden`, when given, collects every string and number so removed (see `secret_values`)."""

    def walk(node: Any, path: KeyPath) -> Any:
        if isinstance(node, Mapping):
            names = path in name_maps
            out = {}
            for k, v in node.items():
                if not names and is_secret_key(k):
                    out[k] = REDACTED
                    if hidden is not None:
                        hidden.update(_leaves(v))
                else:
                    out[k] = walk(v, (*path, str(k)))
            return out
        if isinstance(node, list | tuple):
            return [walk(item, path) for item in node]
        return node

    return walk(value, ())


# Shorter values are not scrubbed from free text: `on`, `1234` would mangle every page they occur in.
MIN_SCRUBBED = 6


def secret_values(document: Mapping[str, Any]) -> frozenset[str]:
    """Every value the config view redacts (plugin secrets, API tokens, tokens.yaml keys), for
    `scrub`: a secret a plugin prints to stderr or echoes under an innocent key is still hidden."""
    found: set[str] = set()
    redact(thaw(document), name_maps=CONFIG_NAME_MAPS, hidden=found)
    return frozenset(v for v in found if len(v) >= MIN_SCRUBBED)


def scrub(value: Any, secrets: Collection[str]) -> Any:
    """`value` (text, or JSON-like data at any depth) with every occurrence of a secret replaced by
    REDACTED, longest first so a secret that contains another goes whole."""
    ordered = sorted(secrets, key=len, reverse=True)

    def text(s: str) -> str:
        for secret in ordered:
            if secret in s:
                s = s.replace(secret, REDACTED)
        return s

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return text(node)
        if isinstance(node, Mapping):
            return {text(str(k)): walk(v) for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [walk(item) for item in node]
        return node

    return walk(value) if ordered else value


def _leaves(node: Any) -> list[str]:
    if isinstance(node, Mapping):
        return [leaf for v in node.values() for leaf in _leaves(v)]
    if isinstance(node, list | tuple):
        return [leaf for item in node for leaf in _leaves(item)]
    if isinstance(node, str | int | float) and not isinstance(node, bool):
        return [str(node)]
    return []


def config_view(document: Mapping[str, Any]) -> dict[str, Any]:
    """The merged config document, redacted, with the token lists shown safely: `api.auth.tokens`
    as name and scopes only, `tokens:` (tokens.yaml) without its keys."""
    doc = thaw(document)
    view: dict[str, Any] = redact({k: v for k, v in doc.items() if k != "tokens"}, name_maps=CONFIG_NAME_MAPS)
    api = doc.get("api") or {}
    if "auth" in api:
        # `auth` is a secret-like key, so redaction replaced the whole subtree; put back what is safe.
        view["api"]["auth"] = {
            "tokens": [
                {"name": str(entry.get("name") or f"api.auth.tokens[{index}]"), "scopes": _scopes(entry)}
                for index, entry in enumerate((api["auth"] or {}).get("tokens") or [])
            ]
        }
    if "tokens" in doc:
        view["tokens"] = [
            {
                "name": str(entry.get("name") or f"tokens[{index}]"),
                **{k: entry[k] for k in ("scopes_file", "scopes_hash") if k in entry},
                **({"scopes": _scopes(entry)} if "scopes" in entry else {}),
            }
            for index, entry in enumerate(doc["tokens"] or [])
        ]
    return view


def _scopes(entry: Mapping[str, Any]) -> list[str]:
    return [str(scope) for scope in entry.get("scopes") or []]
