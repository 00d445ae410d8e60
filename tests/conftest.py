"""Shared fixtures. Tests use real SQLite or PostgreSQL and real plugin processes, never mocks.

The database is chosen before Django starts: DATABASE_URL (PostgreSQL in CI's second run), else
a SQLite file under a temporary directory so threads and subprocesses share it.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

_TMP = Path(tempfile.mkdtemp(prefix="ductile-tests-"))
os.environ.setdefault("DUCTILE_DB_PATH", str(_TMP / "ductile.db"))
os.environ.setdefault("DUCTILE_TEST_SQLITE_PATH", str(_TMP / "test-ductile.db"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ductile_site.settings")

import pytest  # noqa: E402

from tests.support import ConfigDir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def config_dir(tmp_path: Path) -> ConfigDir:
    """A fresh config directory with the bundled and test plugin roots and its own SQLite file."""
    return ConfigDir(tmp_path / "config")


@pytest.fixture
def runtime(config_dir: ConfigDir):
    """Install `config_dir`'s runtime as the process runtime for in-process tests."""
    from gateway.runtime import RUNTIME

    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    config_dir.write()
    RUNTIME.load(config_dir.path, os.environ)
    if RUNTIME.error:
        raise RUNTIME.error
    yield RUNTIME
    RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous
