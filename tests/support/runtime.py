"""A config directory's runtime installed as this process's (gateway.runtime.RUNTIME), for
in-process tests."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tests.support.config_dirs import ConfigDir


def load_runtime(config: ConfigDir, environ: Mapping[str, str] | None = None) -> Any:
    """Write the config and make it the process runtime (gateway.runtime.RUNTIME); a config
    error fails the test with its message."""
    from gateway.runtime import RUNTIME

    config.write()
    RUNTIME.load(config.path, os.environ if environ is None else environ)
    if RUNTIME.error:
        raise RUNTIME.error
    return RUNTIME


@contextmanager
def installed_runtime(config: ConfigDir, environ: Mapping[str, str] | None = None) -> Iterator[Any]:
    """`load_runtime` for the length of a block; the previous process runtime comes back after."""
    from gateway.runtime import RUNTIME

    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    try:
        yield load_runtime(config, environ)
    finally:
        RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous
