"""JSON Schema validation that remembers which documents passed: a config, a manifest, the pipelines.

Why: importing jsonschema is ~30 ms of every gateway process's start (a worker's ~0.2 s, each CLI
command's; docs/performance-history.md, item 38), and the documents it checks rarely change between
two starts. Validation is a function of the schema, the validator and the document alone, so a
document that passed once passes again: its digest is remembered, and jsonschema is imported only
for a document not seen before. A document that failed is never remembered: its problems are
found afresh at every load, with file, line and key.

The memo is a file of digests in the user's cache directory (`$XDG_CACHE_HOME/ductile`, else
`~/.cache/ductile`), readable by its owner alone (a digest covers the config's values, tokens
included). It is a cache: a missing, unreadable or damaged file is an empty memo, and a write
that fails (a read-only home, a full disk) is skipped.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import blake3

from .atomic import write_atomic

HEADER = "ductile known-valid 1"
_HEX = frozenset("0123456789abcdef")
# Digests kept, the newest last: the configs and manifests of a few installations and their
# recent edits. An older one is forgotten, so its document is validated again.
MEMO_SIZE = 512


class NotCanonical(TypeError):
    """A value with no single JSON spelling (a non-string key, a date, NaN): not remembered."""


def canonical(document: Any) -> bytes:
    """The document as JSON with sorted keys, or NotCanonical. Why the walk first: `json.dumps`
    spells the key 1 and the key "1" alike, and a tuple like a list, though the schema tells them
    apart (a tuple is not a JSON array to jsonschema): two documents with one digest must be
    the same document."""
    _check(document, depth=0)
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _check(value: Any, depth: int) -> None:
    if depth > 200:
        raise NotCanonical("nested too deeply")
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise NotCanonical(f"key {key!r} is not a string")
            _check(item, depth + 1)
    elif kind is list:
        for item in value:
            _check(item, depth + 1)
    elif kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise NotCanonical(f"{value!r} is not a JSON number")
    elif kind not in (str, int, bool, type(None)):
        raise NotCanonical(f"{kind.__name__} is not a JSON value")


@functools.cache
def _validator_stamp() -> bytes:
    """Which jsonschema would judge, without importing it (`find_spec` of a top-level name does
    not): its validators module's size and modification time, so an upgraded library judges every
    document again."""
    spec = importlib.util.find_spec("jsonschema")
    if spec is None or spec.origin is None:
        return b"?"
    validators = Path(spec.origin).with_name("validators.py")
    try:
        stat = validators.stat()
    except OSError:
        return b"?"
    return f"{validators}:{stat.st_size}:{stat.st_mtime_ns}".encode()


def memo_path(environ: Mapping[str, str]) -> Path | None:
    """`$XDG_CACHE_HOME/ductile/known-valid`, else under `$HOME/.cache`; a relative path in
    either is ignored (the XDG rule), and without an absolute one there is no memo."""
    if os.path.isabs(environ.get("XDG_CACHE_HOME", "")):
        return Path(environ["XDG_CACHE_HOME"]) / "ductile" / "known-valid"
    if os.path.isabs(environ.get("HOME", "")):
        return Path(environ["HOME"]) / ".cache" / "ductile" / "known-valid"
    return None


class KnownValid:
    """The memo of one process, read from its file at first use and written back by `save`."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._digests: dict[str, None] | None = None  # insertion-ordered: the oldest first
        self._added = False
        self._schemas: dict[int, tuple[Mapping[str, Any], bytes]] = {}

    def errors(self, schema: Mapping[str, Any], document: Any, *, foreign: bool = False) -> list[Any]:
        """jsonschema's errors for the document (Draft 2020-12), or none when it passed before.
        A `foreign` schema (a plugin manifest's, not the gateway's own) is checked first, and one
        jsonschema cannot apply raises SchemaUnusable saying why."""
        try:
            key = self._digest(schema, document)
        except NotCanonical:
            key = None
        with self._lock:
            if key is not None and key in self._known():
                return []
        from jsonschema import Draft202012Validator

        if foreign:
            found = _foreign_errors(Draft202012Validator, schema, document)
        else:
            found = list(Draft202012Validator(schema).iter_errors(document))
        if not found and key is not None:
            with self._lock:
                self._known()[key] = None
                self._added = True
        return found

    def save(self) -> None:
        """Write the memo if this process added to it; a failure leaves the old file (or none)."""
        with self._lock:
            if not self._added or self.path is None or self._digests is None:
                return
            kept = list(self._digests)[-MEMO_SIZE:]
            self._added = False
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(self.path, "\n".join([HEADER, *kept, ""]), mode=0o600)
        except OSError:
            pass

    def _known(self) -> dict[str, None]:
        if self._digests is None:
            self._digests = dict.fromkeys(self._read())
        return self._digests

    def _read(self) -> list[str]:
        if self.path is None:
            return []
        try:
            lines = self.path.read_text(encoding="ascii").splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        if lines[:1] != [HEADER]:
            return []
        return [line for line in lines[1:] if len(line) == 64 and set(line) <= _HEX]

    def _digest(self, schema: Mapping[str, Any], document: Any) -> str:
        # The schemas are the gateway's own, loaded once per process (functools.cache): their
        # spelling is computed once, and the entry holds the schema so its id is not reused.
        held = self._schemas.get(id(schema))
        if held is None or held[0] is not schema:
            held = (schema, blake3.blake3(canonical(schema) + b"\0" + _validator_stamp()).digest())
            self._schemas[id(schema)] = held
        return blake3.blake3(held[1] + canonical(document)).hexdigest()


@functools.cache
def process_memo() -> KnownValid:
    """This process's memo; its file is found from the environment at first use, not at import."""
    return KnownValid(memo_path(os.environ))


def schema_errors(schema: Mapping[str, Any], document: Any, *, foreign: bool = False) -> list[Any]:
    """The process memo's `errors`: what the config loader, the manifest loader, the registry
    (a plugin's `config_schema`) and the pipelines' compiler validate with."""
    return process_memo().errors(schema, document, foreign=foreign)


def describe(error: Any) -> tuple[tuple[str | int, ...], str]:
    """Where and what, for one jsonschema error: a missing key is named itself (not the mapping
    that lacks it), a constant says what it wants, an `anyOf` with a `description` says the
    value it got against that description (an `anyOf`'s, or a `pattern`'s in words), and a `not`
    says why in its own `description` (a webhook path that is not /healthz)."""
    path = tuple(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        # One error per missing key: the one this error's message names.
        missing = [k for k in error.validator_value if k not in error.instance and error.message.startswith(repr(k))]
        if missing:
            return (*path, missing[0]), f"missing required key {missing[0]!r}"
    if error.validator == "const":
        return path, f"must be {error.validator_value!r}, got {error.instance!r}"
    if error.validator in ("anyOf", "pattern") and "description" in error.schema:
        return path, f"expected {error.schema['description']}, got {error.instance!r}"
    if (
        error.validator == "not"
        and isinstance(error.validator_value, Mapping)
        and "description" in error.validator_value
    ):
        return path, str(error.validator_value["description"])
    return path, str(error.message)


def describe_all(error: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """`describe`, with each key `additionalProperties: false` refuses named on its own, at its
    own line: the schema's `x-refused-keys` says why, else the keys that are known are listed."""
    path = tuple(error.absolute_path)
    if (
        error.validator == "additionalProperties"
        and error.validator_value is False
        and isinstance(error.instance, dict)
    ):
        known = error.schema.get("properties", {})
        why = error.schema.get("x-refused-keys", {})
        return [
            ((*path, key), why.get(key) or f"unknown key {key!r} (expected {', '.join(known)})")
            for key in error.instance
            if key not in known
        ]
    return [describe(error)]


class SchemaUnusable(ValueError):
    """A schema from outside the gateway (a plugin manifest's `config_schema`) that jsonschema
    cannot apply: not valid JSON Schema, an unknown type, a `$ref` that resolves nowhere."""


def _foreign_errors(validator: Any, schema: Mapping[str, Any], document: Any) -> list[Any]:
    from jsonschema.exceptions import SchemaError

    try:
        validator.check_schema(schema)
        return list(validator(schema).iter_errors(document))
    except SchemaError as exc:
        where = "/".join(map(str, exc.absolute_path))
        raise SchemaUnusable(f"{exc.message}" + (f" (at {where})" if where else "")) from exc
    except Exception as exc:  # whatever else jsonschema raises while applying it: an author's mistake
        raise SchemaUnusable(f"{type(exc).__name__}: {exc}") from exc


def unknown_keys(schema: Mapping[str, Any], document: Any) -> list[tuple[str | int, ...]]:
    """The paths of the keys the document holds where the schema says `x-warn-unknown` and does
    not name them: what a loader warns about instead of refusing, so documents written for newer
    versions still load. `$ref`s are resolved within `schema` (`#/$defs/...`); `allOf` is read
    through its first member, `oneOf` through the member of the document's kind (list or not)."""
    found: list[tuple[str | int, ...]] = []

    def walk(node: Mapping[str, Any], data: Any, path: tuple[str | int, ...]) -> None:
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            node = schema["$defs"][ref.removeprefix("#/$defs/")]
        if "allOf" in node:
            return walk(node["allOf"][0], data, path)
        if "oneOf" in node:
            for option in node["oneOf"]:
                if (option.get("type") == "array") == isinstance(data, list):
                    return walk(option, data, path)
            return None
        if isinstance(data, dict):
            props = node.get("properties", {})
            for key, value in data.items():
                if key in props:
                    walk(props[key], value, (*path, key))
                elif isinstance(node.get("additionalProperties"), dict):
                    walk(node["additionalProperties"], value, (*path, key))
                elif node.get("x-warn-unknown"):
                    found.append((*path, key))
        elif isinstance(data, list) and isinstance(node.get("items"), dict):
            for index, item in enumerate(data):
                walk(node["items"], item, (*path, index))
        return None

    walk(schema, document, ())
    return found
