"""What the console shows of stored data: secret-like keys redacted exactly as `GET /config/view`
does, and every secret value the loaded config holds scrubbed from text and JSON wherever it
appears (a plugin that prints its API key to stderr, a payload that carries a token under an
innocent key): the rule of gateway/config/redaction.py, as every other surface applies it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.redaction import Scrubber, redact
from gateway.runtime import NO_SECRETS, RUNTIME


@dataclass(frozen=True)
class Safe:
    scrubber: Scrubber = NO_SECRETS

    @classmethod
    def current(cls) -> Safe:
        """From the runtime this process serves (none while no config has loaded: then only
        secret-like keys are redacted)."""
        return cls(RUNTIME.scrubber())

    def json(self, value: Any) -> Any:
        return self.scrubber.json(redact(value))

    def knowing(self, *values: Any) -> Safe:
        """This, also scrubbing what `values` hold under secret-like keys: a token a job carried in
        its payload is hidden in that job's stderr and errors too, not only in its payload."""
        return Safe(self.scrubber.knowing(*values))

    def text(self, value: str | None) -> str:
        return self.scrubber.text(value or "")


def safe_text(value: str | None) -> str:
    """A stored text (an error, a reason) as a page may show it."""
    return Safe.current().text(value)
