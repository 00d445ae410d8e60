"""The config as `GET /config/view` shows it (spec 000 "API Reference" §12): secrets redacted by the
rule every surface applies (gateway/config/redaction.py). Pure, no I/O.

API token values are omitted (name and scopes shown); `tokens.yaml` keys are omitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config.frozen import thaw
from gateway.config.redaction import CONFIG_NAME_MAPS, redact
from gateway.runtime import Runtime


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


def served_config(runtime: Runtime) -> dict[str, Any]:
    """`GET /config/view` and MCP's config resource: the loaded config, redacted, with each
    pipeline's compiled routes (keyed by pipeline names, which are names, not fields; predicates
    may hold anything) and the pipelines' fingerprint."""
    compiled = {name: p.shape() for name, p in sorted(runtime.pipelines.pipelines.items())}
    return {
        **config_view(runtime.config.document),
        "compiled_routes": redact(compiled, name_maps={()}),
        "pipelines_fingerprint": runtime.pipelines.fingerprint(),
    }
