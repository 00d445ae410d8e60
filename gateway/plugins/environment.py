"""The environment a plugin process gets (spec 000 "Plugin Protocol"): a fixed base and the
operator's passthrough list, never the gateway's own secrets."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping

_BASE_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR")


def plugin_environment(passthrough: Iterable[str] = (), source: Mapping[str, str] | None = None) -> dict[str, str]:
    """PATH, HOME, LANG, LANGUAGE, LC_*, TZ, TMPDIR and the operator's passthrough list (an empty
    name in it is ignored, as the original does); never the gateway's secrets.

    Plus DUCTILE_PYTHON: the gateway's own interpreter, which can import every package of the
    project (pyproject.toml). A Python plugin's `#!/usr/bin/env python3` finds whatever python3 is
    first on PATH, the system's when the gateway was started as `.venv/bin/ductile`; a bundled
    plugin that needs a library (fetch) runs itself again under this one."""
    source = os.environ if source is None else source
    wanted = set(_BASE_ENV) | {name.strip() for name in passthrough if name.strip()}
    env = {k: v for k, v in source.items() if k in wanted or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    if sys.executable:
        env.setdefault("DUCTILE_PYTHON", sys.executable)
    return env
