"""Django's SQLite backend with the gateway's rules for opening the ledger file.

- The directory of `state.path` is created on first use (mode 0700) by whichever command opens
  the database first (`migrate`, `runworkers`, a CLI query), and the file itself is created 0600;
  SQLite gives its -wal and -shm files the database file's permissions. A path that cannot be
  created is an error naming it, not SQLite's "unable to open database file".
- A process whose config could not be loaded has no database: it never falls back to a file of
  its own choosing (a stray `ductile.db` beside the config), it says why it has none.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from django.db.backends.sqlite3 import base


def is_file_database(name: str) -> bool:
    """False for the in-memory databases Django tells apart by name (and for URIs)."""
    return bool(name) and name != ":memory:" and not name.startswith("file:")


def prepare_database_file(name: str) -> None:
    """Create the database's directory (0700) and an empty database file (0600) when missing."""
    path = Path(name)
    try:
        if not path.parent.is_dir():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.close(fd)
    except FileExistsError:
        pass
    except OSError as exc:
        # sqlite3's own error class: Django translates it into django.db.OperationalError.
        raise sqlite3.OperationalError(
            f"cannot create the SQLite database {path} (state.path): {exc.strerror or exc}: {exc.filename or path}"
        ) from exc


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        if not self.settings_dict["NAME"]:
            # Raised as it is (Django's error translation only maps DB-API errors): the CLI reports
            # a ConfigError with its problems and exit code 78.
            from gateway.runtime import RUNTIME  # not at import: the backend loads before the app registry

            if RUNTIME.error is not None:
                raise RUNTIME.error
            raise sqlite3.OperationalError(
                "no database: set DATABASE_URL, or load a config directory (--config-dir, "
                "$DUCTILE_CONFIG_DIR) whose state.path names the SQLite file"
            )
        return super().get_connection_params()

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        name = str(conn_params["database"])
        if is_file_database(name):
            prepare_database_file(name)
        return super().get_new_connection(conn_params)
