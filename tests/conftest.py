"""Shared fixtures. Tests use real SQLite or PostgreSQL and real plugin processes, never mocks.

The database: DATABASE_URL (PostgreSQL in CI's second run), else a SQLite file under a temporary
directory (`django_db_modify_db_settings`), so threads and subprocesses share it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# An xdist worker (`-n 2`) inherits the environment the controller set below: its directory is one
# of the controller's session directory, and its ledger files are its own, not the controller's.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    _SESSION = Path(os.environ["DUCTILE_TEST_TMP"])
    _TMP = _SESSION / _WORKER
    _TMP.mkdir()
else:
    _SESSION = _TMP = Path(tempfile.mkdtemp(prefix="ductile-tests-"))
    (_TMP / "tmp").mkdir()
# Every process of the suite, this one included, keeps its temporary files under the session's: the
# wake-up sockets of the daemons it kills, plugins' scratch, browser profiles, pytest's own tmp_path
# (a worker's too, under the controller's base). Before, each session left them in the system's
# temporary directory, beside its own directory of screenshots.
os.environ["TMPDIR"] = tempfile.tempdir = str(_SESSION / "tmp")
# The screenshots are for looking at after the run (pytest_terminal_summary says where), so a
# session's directory stays; the sessions of more than a day ago (none still running) go.
for _old in _SESSION.parent.glob("ductile-tests-*"):
    try:
        stale = _old != _SESSION and time.time() - _old.stat().st_mtime > 86400
    except OSError:
        continue  # another session pruned it first
    if stale:
        shutil.rmtree(_old, ignore_errors=True)
for _name, _file in (("DUCTILE_DB_PATH", "ductile.db"), ("DUCTILE_TEST_SQLITE_PATH", "test-ductile.db")):
    if _WORKER or _name not in os.environ:
        os.environ[_name] = str(_TMP / _file)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ductile_site.settings")
# The session's directory, where every worker's browser screenshots go (tests.support.browser).
os.environ["DUCTILE_TEST_TMP"] = str(_SESSION)
# The suite's own memo of documents that passed their schema (gateway.config.validity), not the user's.
if _WORKER or "XDG_CACHE_HOME" not in os.environ:
    os.environ["XDG_CACHE_HOME"] = str(_TMP / "cache")

import pytest  # noqa: E402

from tests.support import processes  # noqa: E402
from tests.support.browser import SCREENSHOTS, browser, page_as_text  # noqa: E402, F401 - the `browser` fixture
from tests.support.config_dirs import ConfigDir  # noqa: E402
from tests.support.runtime import installed_runtime  # noqa: E402

# The `process` tests start processes of their own besides plugin runs: the CLI, daemons, servers,
# `python -c` scripts of the gateway, a browser. Every test under tests/processes/ is one, and so
# is every test that uses one of these fixtures; any other is marked where it is written (a test
# that starts a gateway process unmarked fails: tests.support.processes).
PROCESSES_DIR = Path(__file__).parent / "processes"
PROCESS_FIXTURES = frozenset({"browser", "process_db", "outage_db"})


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """The in-process tests' SQLite ledger is the file named above, in WAL mode as the gateway
    runs it, and not Django's default for tests, an in-memory database in shared-cache mode: there
    a reader meets a writer's table lock and fails at once ("database table is locked", a daemon
    thread's claim and the test's read, in test_idle_rechecks) where the gateway's file waits.
    Set here, just before the test database is made: pytest-django reads the settings before
    this module runs, so the environment set above comes too late for them. Under xdist each
    worker has its own: its own file here, and on PostgreSQL pytest-django's `_gwN` suffix."""
    from django.conf import settings

    default = settings.DATABASES["default"]
    if default["ENGINE"] == "gateway.storage.sqlite3":
        default["TEST"]["NAME"] = os.environ["DUCTILE_TEST_SQLITE_PATH"]


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
    with fresh_database(url) as config_dir.database_url:
        yield config_dir


@pytest.fixture
def outage_db(config_dir: ConfigDir):
    """`process_db` for a test that takes its database down (tests.support.outages): on the
    PostgreSQL run a fresh database on a server of this process's own, so that no test running
    beside it on another worker loses its connections."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        yield config_dir
        return
    from tests.support.outages import own_server

    with fresh_database(own_server().url) as config_dir.database_url:
        yield config_dir


@contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """A database of its own on the PostgreSQL server of `server_url`, dropped after: its URL."""
    import uuid

    import psycopg

    name = f"ductile_p_{uuid.uuid4().hex[:10]}"
    base, _, _ = server_url.rpartition("/")
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"{base}/{name}"
    with psycopg.connect(server_url, autocommit=True) as conn:
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the `process` tests the directory or the fixtures name, before `-m` selects."""
    for item in items:
        if item.path.is_relative_to(PROCESSES_DIR) or PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    processes.process_test_running = item.get_closest_marker("process") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report kept on the test, so a fixture's teardown can tell a failed test (the
    `browser` fixture then saves the page it failed on). A failed browser test's report also
    carries that page's address and text: CI's output is all a reader of a remote run gets."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    page = item.funcargs.get("browser") if report.when == "call" and report.failed else None
    if page is not None:
        report.sections.append(("the page the test failed on", page_as_text(page)))
    return report


def pytest_terminal_summary(terminalreporter) -> None:
    """Screenshots are for looking at: say where they are."""
    if SCREENSHOTS.exists():
        count = len(list(SCREENSHOTS.glob("*.png")))
        terminalreporter.write_line(f"browser screenshots ({count}): {SCREENSHOTS}")
