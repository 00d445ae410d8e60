"""Real database outages for tests: a PostgreSQL server stopped and started again (scripts/pg-server,
as CI starts the suite's), and SQLite files made immutable (`chattr +i`)."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.network import free_port


class PgServer:
    """A server of scripts/pg-server in `directory`, which a test may stop and start."""

    def __init__(self, directory: Path, port: int):
        self.directory, self.port = directory, port

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def of(cls, cfg: ConfigDir) -> PgServer:
        """The server of `cfg`'s database (the `outage_db` fixture's), or the test is skipped on SQLite."""
        if not cfg.database_url:
            pytest.skip("PostgreSQL: a server to stop and start")
        server = own_server()
        if urlsplit(cfg.database_url).port != server.port:
            raise AssertionError("a test that stops its database's server takes its config from `outage_db`")
        return server

    def _run(self, action: str) -> None:
        env = {**os.environ, "DUCTILE_PG_DIR": str(self.directory), "DUCTILE_PG_PORT": str(self.port)}
        subprocess.run([str(REPO / "scripts" / "pg-server"), action], env=env, check=True, capture_output=True)

    def stop(self) -> None:
        """A fast shutdown: every client's connection is ended, as at a server's restart."""
        self._run("stop")

    def start(self) -> None:
        self._run("start")

    @contextmanager
    def stopped(self, seconds: float = 0.0) -> Iterator[None]:
        """Down for the block and at least `seconds`; up again after it, whatever happened in it."""
        self.stop()
        began = time.monotonic()
        try:
            yield
            time.sleep(max(0.0, seconds - (time.monotonic() - began)))
        finally:
            self.start()

    def restart(self) -> None:
        with self.stopped():
            pass

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


@functools.cache
def own_server() -> PgServer:
    """A PostgreSQL server of this test process's own (each xdist worker has one), started at its
    first use and removed when the process exits. Stopping the suite's server instead ended the
    connections of every test running beside it on another worker."""
    # Beside the session's directory, not in it: scripts/pg-server hands it to the postgres user
    # when run as root, who must be able to reach it.
    root = Path(tempfile.mkdtemp(prefix="ductile-pg-", dir=Path(os.environ["DUCTILE_TEST_TMP"]).parent))
    root.chmod(0o755)
    server = PgServer(root, free_port())
    try:
        server.start()
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(root, ignore_errors=True)
        if exc.returncode == 3:  # scripts/pg-server: PostgreSQL is not installed here
            pytest.skip("PostgreSQL: a server of the test's own to stop and start (its binaries are not installed)")
        raise
    atexit.register(server.remove)
    return server


def chattr(flag: str, paths: Sequence[Path]) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], check=True, capture_output=True)


def can_make_immutable(directory: Path) -> None:
    """Skips the test where `chattr +i` cannot be used: it needs root and a file system that has the flag."""
    if os.geteuid() != 0:
        pytest.skip("chattr +i needs root (CI runs as root)")
    probe = directory / ".immutable-probe"
    probe.touch()
    try:
        chattr("+i", [probe])
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"chattr +i is not supported under {directory}: {exc.stderr.decode().strip()}")
    chattr("-i", [probe])
    probe.unlink()


@contextmanager
def immutable(paths: Sequence[Path]) -> Iterator[None]:
    """`paths` cannot be written, renamed or removed, even by root, for the block: a ledger whose
    files turned read-only under a running gateway. (Not the `-shm` file: SQLite maps it, and a
    store into a mapping of an immutable file kills the process with SIGBUS.)"""
    present = [p for p in paths if p.exists()]
    chattr("+i", present)
    try:
        yield
    finally:
        chattr("-i", present)


def ledger_files(cfg: ConfigDir) -> list[Path]:
    """A SQLite ledger's files a write goes to (not `-shm`: see `immutable`)."""
    return [cfg.db_path, cfg.db_path.with_name(cfg.db_path.name + "-wal")]


def can_go_down(cfg: ConfigDir) -> None:
    """Skips the test where `database_down` cannot take the config's database down."""
    if cfg.database_url:
        PgServer.of(cfg)
    else:
        cfg.db_path.parent.mkdir(parents=True, exist_ok=True)
        can_make_immutable(cfg.db_path.parent)


@contextmanager
def database_down(cfg: ConfigDir, seconds: float) -> Iterator[None]:
    """The database of the config's processes refuses them for the block and at least `seconds`:
    on PostgreSQL its server is stopped (every connection ends, none can be made), on SQLite the
    ledger's files are made immutable (reads go on, every write fails)."""
    began = time.monotonic()
    if cfg.database_url:
        with PgServer.of(cfg).stopped(seconds):
            yield
        return
    with immutable(ledger_files(cfg)):
        yield
        time.sleep(max(0.0, seconds - (time.monotonic() - began)))
