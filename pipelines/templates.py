"""`with:` payload remaps (DSL reference §3.7). Pure.

`{payload.count}` alone keeps its type; text around references makes a string; every entry reads
the same pre-remap snapshot; a missing path or a malformed template is an error, never a silent
null or empty string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from pipelines.paths import MISSING, resolve, split_path

WITH_ROOTS = ("payload", "context")
_REFERENCE = re.compile(r"\{([^{}]*)\}")


class TemplateError(ValueError):
    pass


def references(template: Any, *, key: str = "with") -> list[str]:
    """The paths a template reads, at any depth of a nested value; raises TemplateError for
    malformed ones (load-time check)."""
    if isinstance(template, Mapping):
        return [ref for k, v in template.items() for ref in references(v, key=f"{key}.{k}")]
    if isinstance(template, list):
        return [ref for i, v in enumerate(template) for ref in references(v, key=f"{key}[{i}]")]
    if not isinstance(template, str):
        return []
    found = []
    for match in _REFERENCE.finditer(template):
        path = match.group(1).strip()
        if split_path(path, WITH_ROOTS) is None:
            raise TemplateError(f"{key}: {{{path}}} must reference payload.* or context.*")
        found.append(path)
    stripped = _REFERENCE.sub("", template)
    if "{" in stripped or "}" in stripped:
        raise TemplateError(f"{key}: unbalanced braces in {template!r}")
    return found


def render(
    template: Any, scope: Mapping[str, Any], *, key: str = "with", missing: Callable[[str], Any] | None = None
) -> Any:
    """One value: a pure reference keeps the referenced value's type; mixed text is a string.
    Mappings and lists are rendered entry by entry, so nested templates are filled in too.
    `missing(path)` stands in for an absent path instead of failing (dry runs only)."""
    if isinstance(template, Mapping):
        return {k: render(v, scope, key=f"{key}.{k}", missing=missing) for k, v in template.items()}
    if isinstance(template, list):
        return [render(v, scope, key=f"{key}[{i}]", missing=missing) for i, v in enumerate(template)]
    if not isinstance(template, str):
        return template
    refs = references(template, key=key)
    if not refs:
        return template
    whole = _REFERENCE.fullmatch(template.strip())
    if whole is not None and template.strip() == template:
        return _lookup(scope, whole.group(1).strip(), key, missing)

    def substitute(match: re.Match[str]) -> str:
        value = _lookup(scope, match.group(1).strip(), key, missing)
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return _REFERENCE.sub(substitute, template)


def remap(
    payload: Mapping[str, Any],
    with_: Mapping[str, Any],
    scope: Mapping[str, Any],
    *,
    missing: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """The request payload after `with:`: top-level keys added or overridden, all from one snapshot."""
    rendered = {key: render(value, scope, key=f"with.{key}", missing=missing) for key, value in with_.items()}
    return {**payload, **rendered}


def _lookup(scope: Mapping[str, Any], path: str, key: str, missing: Callable[[str], Any] | None) -> Any:
    value = resolve(scope, path)
    if value is MISSING and missing is not None:
        return missing(path)
    if value is MISSING:
        raise TemplateError(f'{key}: {{{path}}} is missing (with: never substitutes null or "")')
    return value
