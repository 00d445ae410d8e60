"""What the console shows of stored data: secret-like keys redacted exactly as `GET /config/view`
does (gateway/reports/redaction.py), and every secret value the loaded config holds scrubbed from text
and JSON wherever it appears (a plugin that prints its API key to stderr, a payload that carries
a token under an innocent key)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.errors import ConfigError
from gateway.reports.redaction import MIN_SCRUBBED, redact, scrub, secret_values
from gateway.runtime import RUNTIME

_last: tuple[object, Safe] | None = None  # (runtime, its Safe): a reload brings a new runtime


@dataclass(frozen=True)
class Safe:
    secrets: frozenset[str] = frozenset()

    @classmethod
    def current(cls) -> Safe:
        """From the runtime this process serves (none while its config fails to load: then only
        secret-like keys are redacted). Worked out once per loaded runtime, not per table cell."""
        global _last
        try:
            runtime = RUNTIME.get()
        except ConfigError:
            return cls()
        if _last is None or _last[0] is not runtime:
            _last = (runtime, cls(secret_values(runtime.config.document)))
        return _last[1]

    def json(self, value: Any) -> Any:
        return scrub(redact(value), self.secrets)

    def knowing(self, *values: Any) -> Safe:
        """This, also scrubbing what `values` hold under secret-like keys: a token a job carried in
        its payload is hidden in that job's stderr and errors too, not only in its payload."""
        hidden: set[str] = set()
        for value in values:
            redact(value, hidden=hidden)
        return Safe(self.secrets | {v for v in hidden if len(v) >= MIN_SCRUBBED})

    def text(self, value: str | None) -> str:
        return scrub(value or "", self.secrets)


def safe_text(value: str | None) -> str:
    """A stored text (an error, a reason) as a page may show it."""
    return Safe.current().text(value)
