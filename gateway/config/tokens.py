"""API tokens and their scopes (spec 000 §9.4), read once per config load.

Two sources: inline `api.auth.tokens` (`token`, `scopes`; values usually `${ENV}`), and the
`tokens:` registry of `tokens.yaml` (`name`, `key`, `scopes_file`, `scopes_hash: blake3:…`). A
registry token whose scope file is missing or does not hash to `scopes_hash` is refused and the
reason logged; the rest still load. Registry entries without a scope file are plain secrets
(webhooks name them in `secret_ref`). Secrets are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from gateway.config.frozen import thaw
from gateway.config.integrity import scope_file_path
from gateway.config.model import GatewayConfig
from gateway.logs import logger

log = logger("api")

ADMIN = "*"
RESOURCES = ("plugin", "jobs", "events")
# The original's finer read scopes, each granted by the broad scope named beside it (so a token
# with `jobs:ro`, `jobs:rw`, `plugin:ro` or `plugin:rw` keeps every read it had) and grantable alone
# for least privilege: `plugin:catalog:ro` reads manifests (GET /plugin/{name}); `jobs:status:ro`
# reads jobs' state (/job/{id}, /jobs, /stopwatch), `jobs:tree:ro` trees, `jobs:logs:ro` attempts;
# `jobs:result:ro` is what lets any of those show what a plugin wrote (result, last_error, stderr).
FINER = {
    "plugin:catalog:ro": "plugin:ro",
    "jobs:status:ro": "jobs:ro",
    "jobs:result:ro": "jobs:ro",
    "jobs:logs:ro": "jobs:ro",
    "jobs:tree:ro": "jobs:ro",
}
# What a plugin wrote about a job (its result, its error, its stderr): the reads of jobs show it
# only to a token with `jobs:result:ro` (which `jobs:ro`, `jobs:rw` and `*` grant), as the
# original shapes its answers; a narrower token sees the same rows without these keys. The API
# (gateway/http/api/auth.py) and MCP (gateway/mcp/) shape their answers by it.
RESULT_FIELDS = ("result", "last_error", "stderr")
RESULTS = "jobs:result:ro"
# The registry's alternative spelling (spec §9.4 example scope file): `read:jobs`, `write:events`.
_VERBS = {"read": "ro", "write": "rw"}


@dataclass(frozen=True)
class ApiToken:
    name: str
    secret: str = field(repr=False)
    scopes: frozenset[str]

    def allows(self, *alternatives: str) -> bool:
        """Whether any of `alternatives` (e.g. `plugin:rw`, `echo:rw`) is granted. A write scope
        implies its read; `*` grants everything."""
        return ADMIN in self.scopes or any(a in self.scopes for a in alternatives)


@dataclass(frozen=True)
class TokenRegistry:
    tokens: tuple[ApiToken, ...] = ()
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    problems: tuple[str, ...] = ()  # refused registry entries, for the log and `system doctor`
    # tokens.yaml entries whose key is empty (an unset `${VAR}`): a secret_ref to one says so.
    unset: frozenset[str] = frozenset()

    def authenticate(self, presented: str) -> ApiToken | None:
        """The token whose secret equals `presented`. Every candidate is compared, in constant
        time, so the time taken says nothing about which (or whether one) matched."""
        found = None
        for token in self.tokens:
            if hmac.compare_digest(token.secret.encode(), presented.encode()):
                found = token
        return found

    def secret(self, name: str) -> str | None:
        return self.secrets.get(name)


def normalise(scopes: Iterable[str]) -> frozenset[str]:
    """Canonical `resource:ro|rw` scopes, each write scope adding its read and each broad read
    scope the finer ones it covers (`FINER`)."""
    out: set[str] = set()
    for raw in scopes:
        scope = str(raw).strip()
        verb, _, resource = scope.partition(":")
        if verb in _VERBS and resource:
            scope = f"{resource}:{_VERBS[verb]}"
        out.add(scope)
        if scope.endswith(":rw"):
            out.add(scope[:-3] + ":ro")
    out.update(fine for fine, broad in FINER.items() if broad in out)
    return frozenset(out)


def load_tokens(config: GatewayConfig) -> TokenRegistry:
    tokens: list[ApiToken] = []
    problems: list[str] = []
    secrets: dict[str, str] = {}
    unset: set[str] = set()
    for index, inline in enumerate(config.api.tokens):
        if not inline.token:
            problems.append(f"api.auth.tokens[{index}]: empty token (is its ${{VAR}} set?); refused")
            continue
        tokens.append(ApiToken(inline.name, inline.token, normalise(inline.scopes)))
    for index, entry in enumerate(thaw(config.document).get("tokens") or []):
        name = str(entry.get("name") or f"tokens[{index}]")
        key = str(entry.get("key") or "")
        if not key:
            problems.append(f"tokens[{index}] ({name}): empty key (is its ${{VAR}} set?); refused")
            unset.add(name)
            continue
        secrets[name] = key
        if "scopes_file" not in entry and "scopes" not in entry:
            continue  # a plain secret, e.g. a webhook's secret_ref
        scopes = _registry_scopes(config.config_dir, entry, name)
        if isinstance(scopes, str):
            problems.append(scopes)
            continue
        tokens.append(ApiToken(name, key, scopes))
    for problem in problems:
        log.warning("API token refused: %s", problem)
    return TokenRegistry(tuple(tokens), secrets, tuple(problems), frozenset(unset))


def _registry_scopes(config_dir: Path, entry: Mapping[str, Any], name: str) -> frozenset[str] | str:
    """The token's scopes, or why it is refused."""
    if "scopes" in entry:
        return normalise(entry["scopes"])
    path = scope_file_path(config_dir, str(entry["scopes_file"]))
    try:
        body = path.read_bytes()
    except OSError as exc:
        return f"token {name!r}: scopes_file {path} cannot be read ({exc.strerror}); refused"
    expected = str(entry.get("scopes_hash") or "")
    actual = "blake3:" + blake3.blake3(body).hexdigest()
    if not hmac.compare_digest(expected.lower(), actual):
        wanted = expected or "a hash"
        return f"token {name!r}: {path} does not match scopes_hash (expected {wanted}, file is {actual}); refused"
    try:
        document = json.loads(body)
    except ValueError as exc:
        return f"token {name!r}: {path} is not JSON ({exc}); refused"
    if not isinstance(document, dict) or not isinstance(document.get("scopes"), list):
        return f'token {name!r}: {path} must be {{"scopes": [...]}}; refused'
    return normalise(document["scopes"])
