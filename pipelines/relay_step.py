"""`relay:` steps (DSL reference §3.5): deliver a projected event to a named remote Ductile
instance. Pure: the step's spec, checked at load, and the event it projects at run time. The
sending (HTTP, signing) is the gateway's (gateway/relay/).

```yaml
- id: relay-to-lab
  relay:
    to: lab                         # an instance of relay-instances.yaml
    event: backup.ready             # the remote event type
    dedupe_key: payload.archive_id  # optional: payload.* / context.*, or a {template}
    with: {archive_id: payload.archive_id}   # optional: the remote payload (default: this one)
    baggage: {trace_id: context.trace_id}    # optional: into the envelope's baggage
```

A value of `with:` or `dedupe_key` is a `payload.*` / `context.*` path, or a template with `{...}`
references (as in a `uses` step's `with:`); a path that is missing is an error, never a null.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines import templates
from pipelines.baggage import BaggageError, BaggageSpec, accrete
from pipelines.baggage import parse as parse_baggage

# Lower-case dotted, as the receiver requires of an event type (`backup.ready`).
EVENT_TYPE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
_KEYS = ("to", "event", "dedupe_key", "with", "baggage")


class RelayStepError(ValueError):
    """`path` is the offending key under `relay:`; `message` the text."""

    def __init__(self, message: str, path: tuple[str, ...] = ()):
        super().__init__(message)
        self.message, self.path = message, path


@dataclass(frozen=True)
class RelaySpec:
    to: str
    event: str
    dedupe_key: str | None = None
    with_: Mapping[str, Any] | None = None
    baggage: BaggageSpec = field(default_factory=BaggageSpec)


@dataclass(frozen=True)
class Projection:
    """What a relay step sends: the remote event's payload and dedupe key, and the baggage."""

    payload: dict[str, Any]
    dedupe_key: str | None
    baggage: dict[str, Any]


def parse(raw: Any) -> RelaySpec:
    """Validate a step's `relay:` mapping (load time); RelayStepError names the key."""
    if not isinstance(raw, Mapping):
        raise RelayStepError("must be a mapping with `to` and `event`")
    for key in raw:
        if key not in _KEYS:
            raise RelayStepError(f"unknown key {key!r} (expected {', '.join(_KEYS)})", (str(key),))
    for key, what in (("to", "the name of a relay-instances.yaml instance"), ("event", "the remote event type")):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise RelayStepError(f"missing {key!r}: {what}", (key,))
    event = raw["event"].strip()
    if not EVENT_TYPE.fullmatch(event):
        raise RelayStepError(f"event {event!r} must be lower-case dotted, such as backup.ready", ("event",))
    dedupe_key = raw.get("dedupe_key")
    if dedupe_key is not None:
        if not isinstance(dedupe_key, str) or not dedupe_key.strip():
            raise RelayStepError("dedupe_key must be a payload.* or context.* path, or a {template}", ("dedupe_key",))
        _check_expression(dedupe_key, "dedupe_key", ("dedupe_key",))
    with_ = raw.get("with")
    if with_ is not None:
        if not isinstance(with_, Mapping) or not with_:
            raise RelayStepError("with must be a mapping of remote payload keys to paths or templates", ("with",))
        for key, value in with_.items():
            _check_expression(value, f"with.{key}", ("with", str(key)))
    try:
        baggage = parse_baggage(raw.get("baggage"), where="baggage")
    except BaggageError as exc:
        raise RelayStepError(exc.message, ("baggage", *exc.path)) from exc
    return RelaySpec(raw["to"].strip(), event, dedupe_key.strip() if dedupe_key else None, with_, baggage)


def project(spec: RelaySpec, event: Mapping[str, Any], context: Mapping[str, Any]) -> Projection:
    """The remote event from this step's input event and baggage; RelayStepError when a path
    is missing."""
    payload = dict(event.get("payload") or {})
    scope = {"payload": payload, "context": dict(context)}
    try:
        remote = {str(k): _evaluate(v, scope, f"with.{k}") for k, v in spec.with_.items()} if spec.with_ else payload
        dedupe = event.get("dedupe_key")
        if spec.dedupe_key is not None:
            value = _evaluate(spec.dedupe_key, scope, "dedupe_key")
            dedupe = None if value is None else str(value)
        baggage = accrete({}, spec.baggage, scope) if not spec.baggage.empty else {}
    except (templates.TemplateError, BaggageError) as exc:
        raise RelayStepError(str(exc)) from exc
    return Projection(remote, dedupe or None, baggage)


def _as_template(expression: Any) -> Any:
    """A bare path (`payload.x`) reads as the template `{payload.x}`; anything else as it is."""
    if isinstance(expression, str) and "{" not in expression and "}" not in expression:
        return "{" + expression.strip() + "}"
    return expression


def _check_expression(value: Any, key: str, path: tuple[str, ...]) -> None:
    try:
        templates.references(_as_template(value), key=key)
    except templates.TemplateError as exc:
        raise RelayStepError(str(exc), path) from exc


def _evaluate(expression: Any, scope: Mapping[str, Any], key: str) -> Any:
    return templates.render(_as_template(expression), scope, key=key)
