"""What no person or client may read: secret-like keys' values (`redact`) and, in any text, the
secret values the loaded config holds (`Scrubber`). Pure, no I/O.

A key whose name looks secret-like has its value, whatever its shape, replaced by `[REDACTED]`
at any depth. Names the operator chose (plugin names, pipeline names) are not field names:
`keycloak` is a plugin, not a key, so only the values under such names are judged.

One rule for every surface that shows plugin- or agent-controlled text (the API's job reads and
streams, the dashboard, `system watch`, the CLI, the gateway's own log, the audit console): each
builds nothing of its own, it asks the loaded runtime for its `Scrubber` (gateway.runtime).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any

from gateway.config.frozen import thaw

REDACTED = "[REDACTED]"
SECRET_WORDS = ("secret", "key", "token", "password", "passwd", "credential", "auth", "private")
# Fields that look secret-like, or sit in a secret's subtree, but name or describe the secret:
# hidden from the config view with it, never scrubbed from text. Scrubbing a token's name, its
# scopes (`jobs:ro`) or a `secret_ref` would cut every message that mentions them; scrubbing the
# description and date `config token create` writes beside a key cut "the nightly backups
# finished" to "the [REDACTED] finished".
NAMING_FIELDS = frozenset(
    {"name", "scopes", "scopes_file", "scopes_hash", "secret_ref", "key_id", "dedupe_key", "description", "created_at"}
)

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
    `hidden`, when given, collects every string and number so removed, but what NAMING_FIELDS
    hold (see `secret_values`)."""
    return _redacted(value, (), name_maps, hidden)


# Module-level, not a closure of `redact`: a recursive closure is a reference cycle (the function
# and its cell), garbage that only the collector frees, at every API read of a job.
def _redacted(node: Any, path: KeyPath, name_maps: Collection[KeyPath], hidden: set[str] | None) -> Any:
    if isinstance(node, Mapping):
        names = path in name_maps
        out = {}
        for k, v in node.items():
            if not names and is_secret_key(k):
                out[k] = REDACTED
                if hidden is not None and k not in NAMING_FIELDS:
                    hidden.update(_leaves(v))
            else:
                out[k] = _redacted(v, (*path, str(k)), name_maps, hidden)
        return out
    if isinstance(node, list | tuple):
        return [_redacted(item, path, name_maps, hidden) for item in node]
    return node


# Shorter values are not scrubbed from free text: `on`, `1234` would mangle every page they occur in.
MIN_SCRUBBED = 6


def secret_values(document: Mapping[str, Any]) -> frozenset[str]:
    """Every secret value the config view redacts (plugin secrets, API tokens, tokens.yaml keys,
    which relay and webhook secrets are), for `Scrubber`: a secret a plugin prints to stderr or
    echoes under an innocent key is still hidden."""
    found: set[str] = set()
    redact(thaw(document), name_maps=CONFIG_NAME_MAPS, hidden=found)
    return frozenset(v for v in found if len(v) >= MIN_SCRUBBED)


def _leaves(node: Any) -> list[str]:
    if isinstance(node, Mapping):
        return [leaf for k, v in node.items() if k not in NAMING_FIELDS for leaf in _leaves(v)]
    if isinstance(node, list | tuple):
        return [leaf for item in node for leaf in _leaves(item)]
    if isinstance(node, str | int | float) and not isinstance(node, bool):
        return [str(node)]
    return []


# From this length on, a text is first looked through for each secret with str's own search.
LONG_TEXT = 256
# The fewest letters and digits in a row that say something of where a secret may be.
MIN_CORE = 4


class Scrubber:
    """Text, or JSON-like data at any depth, with every occurrence of a secret replaced by
    REDACTED. One compiled pattern, made once per set of secrets (a loaded runtime's: see
    `Runtime.scrubber`), replaces them all in a single pass: the secrets as a trie of
    alternatives, so each position of a text is tried against the next characters of the secrets
    that share what precedes, not against each secret in turn, and the longest secret at a
    position wins.

    Nearly every text holds no secret at all, and on a long one (stderr, a result) the pattern's
    scan, which steps through every character, costs 3-4 times what str's own search does for
    each secret of a config's few, which skips ahead by a secret's length: a long text is given to
    the pattern only when one of them is in it. JSON-like data likewise: encoded once (in C), it
    is walked, string by string, only when a secret's encoded form is in the encoding (JSON
    escapes character by character, so a string holding a secret holds its encoded form)."""

    def __init__(self, secrets: Iterable[str] = ()):
        self.secrets = frozenset(s for s in secrets if s)
        self._pattern = _pattern(self.secrets) if self.secrets else None
        self._encoded = tuple(json.dumps(s)[1:-1] for s in self.secrets)
        # Each secret's longest run of letters and digits, which no JSON encoder escapes (None
        # when a secret has no run long enough to tell anything).
        cores = [max(re.findall("[A-Za-z0-9]+", s), key=len, default="") for s in self.secrets]
        self._cores = tuple(cores) if all(len(core) >= MIN_CORE for core in cores) else None

    def text(self, value: str) -> str:
        if self._pattern is None or not value:
            return value
        if len(value) >= LONG_TEXT and not any(secret in value for secret in self.secrets):
            return value
        return self._pattern.sub(REDACTED, value)

    def json(self, value: Any) -> Any:
        if self._pattern is None or not self._holds_secret(value):
            return value
        return _scrubbed(value, self.text)

    def may_be_in(self, encoded: str) -> bool:
        """Whether JSON text as a plugin's encoder wrote it (a stored response) may hold a secret:
        whether the letters and digits at the core of one are in it, which any encoder writes as
        they are, however it escapes the rest (Python's `\\u00e9`, Go's `\\u0026`). Cheaper than
        parsing the text and encoding it again; `json` then makes sure."""
        if self._pattern is None:
            return False
        return self._cores is None or any(core in encoded for core in self._cores)

    def _holds_secret(self, value: Any) -> bool:
        try:
            encoded = json.dumps(value, default=str)
        except (ValueError, RecursionError):
            return True  # not JSON as it stands (a cycle, deeper than the encoder goes): walk it
        return any(secret in encoded for secret in self._encoded)

    def knowing(self, *values: Any) -> Scrubber:
        """This, also hiding what `values` hold under secret-like keys: a token a job carried in
        its payload is hidden in that job's stderr and errors too, not only in its payload."""
        hidden: set[str] = set()
        for value in values:
            if value:
                redact(value, hidden=hidden)
        found = {v for v in hidden if len(v) >= MIN_SCRUBBED} - self.secrets
        return Scrubber(self.secrets | found) if found else self


def _scrubbed(node: Any, text: Callable[[str], str]) -> Any:
    """`Scrubber.json`'s walk (module-level for the reason `_redacted` is)."""
    if isinstance(node, str):
        return text(node)
    if isinstance(node, Mapping):
        return {text(str(k)): _scrubbed(v, text) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_scrubbed(item, text) for item in node]
    return node


@lru_cache(maxsize=64)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str]:
    """Kept per set: a job's own secrets (`knowing`) are met again at each read of that job."""
    trie: dict[str, Any] = {}
    for secret in secrets:
        node = trie
        for char in secret:
            node = node.setdefault(char, {})
        node[""] = {}  # a secret ends here

    return re.compile(_alternatives(trie))


def _alternatives(node: dict[str, Any]) -> str:
    """The pattern of a trie of secrets (module-level for the reason `_redacted` is)."""
    branches = []
    for char, child in sorted(node.items()):
        if not char:
            continue
        # A run without a fork is one literal: recursion only where secrets part (a 4 KB
        # private key would otherwise nest 4,000 calls deep).
        run = [char]
        while len(child) == 1 and "" not in child:
            ((char, child),) = child.items()
            run.append(char)
        branches.append(re.escape("".join(run)) + _alternatives(child))
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
    # Greedy: where a secret ends and a longer one goes on, the longer one is taken whole.
    return f"(?:{body})?" if "" in node else body
