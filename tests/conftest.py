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
os.environ["DUCTILE_TEST_TMP"] = str(_TMP)
# The suite's own memo of documents that passed their schema (gateway.config.validity), not the user's.
os.environ.setdefault("XDG_CACHE_HOME", str(_TMP / "cache"))

import pytest  # noqa: E402

from tests.support import ConfigDir, installed_runtime  # noqa: E402
from tests.support.browser import SCREENSHOTS, browser  # noqa: E402, F401 - the `browser` fixture


@pytest.fixture
def config_dir(tmp_path: Path) -> ConfigDir:
    """A fresh config directory with the bundled and test plugin roots and its own SQLite file."""
    return ConfigDir(tmp_path / "config")


@pytest.fixture
def runtime(config_dir: ConfigDir):
    """Install `config_dir`'s runtime as the process runtime for in-process tests."""
    with installed_runtime(config_dir) as runtime:
        yield runtime


@pytest.fixture
def process_db(config_dir: ConfigDir):
    """The database gateway subprocesses use: the config's SQLite file, or on the PostgreSQL run
    a fresh database of its own on the same server."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        yield config_dir
        return
    import uuid

    import psycopg

    name = f"ductile_p_{uuid.uuid4().hex[:10]}"
    base, _, _ = url.rpartition("/")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    config_dir.database_url = f"{base}/{name}"
    yield config_dir
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def fresh_live_state(monkeypatch):
    """The live views' clock, snapshot and run index are per process, for one ledger (gateway/reports/live.py,
    gateway/reports/runs.py); a test with a ledger of its own gets its own."""
    from gateway.reports import live, runs

    clock = live.LedgerClock()
    monkeypatch.setattr(live, "CLOCK", clock)
    monkeypatch.setattr(live, "LIVE_FIGURES", live.LiveFigures(clock))
    monkeypatch.setattr(runs, "RECENT_RUNS", runs.RecentRuns())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report kept on the test, so a fixture's teardown can tell a failed test (the
    `browser` fixture then saves the page it failed on)."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def pytest_terminal_summary(terminalreporter) -> None:
    """Screenshots are for looking at: say where they are."""
    if SCREENSHOTS.exists():
        count = len(list(SCREENSHOTS.glob("*.png")))
        terminalreporter.write_line(f"browser screenshots ({count}): {SCREENSHOTS}")
