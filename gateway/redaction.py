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


def redact(value: Any, *, name_maps: Collection[KeyPath] = ()) -> Any:
    """A plain copy of `value` with every secret-like key's value replaced by REDACTED.

    A whole subtree goes, not just its leaves: under `credentials:` even `user:` may be the secret.
    `name_maps` are the paths of mappings whose keys are names (their values are still judged)."""

    def walk(node: Any, path: KeyPath) -> Any:
        if isinstance(node, Mapping):
            names = path in name_maps
            return {
                k: REDACTED if not names and is_secret_key(k) else walk(v, (*path, str(k))) for k, v in node.items()
            }
        if isinstance(node, list | tuple):
            return [walk(item, path) for item in node]
        return node

    return walk(value, ())


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
