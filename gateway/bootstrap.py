"""Process start-up, before Django: find the config directory, load it once, and tell the
settings where the database is (the config's `state.path`, unless DATABASE_URL is set)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from gateway.config.loader import resolve_config_dir
from gateway.runtime import RUNTIME


def config_dir_from_argv(argv: Sequence[str]) -> str | None:
    for index, arg in enumerate(argv):
        if arg in ("--config-dir", "--config") and index + 1 < len(argv):
            return argv[index + 1]
        for flag in ("--config-dir=", "--config="):
            if arg.startswith(flag):
                return arg[len(flag) :]
    return None


def prepare_process(config_dir: str | None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ductile_site.settings")
    directory = resolve_config_dir(config_dir, os.environ)
    os.environ["DUCTILE_CONFIG_DIR"] = str(directory)
    RUNTIME.load(directory)
    if os.environ.get("DATABASE_URL"):
        return
    if RUNTIME.error is None:
        os.environ["DUCTILE_DB_PATH"] = str(RUNTIME.get().config.state_path)
    else:
        # A process that cannot load its config opens no database at all (not one it guessed, nor
        # the one a parent process passed down): the SQLite backend reports the config's problems.
        os.environ.pop("DUCTILE_DB_PATH", None)
