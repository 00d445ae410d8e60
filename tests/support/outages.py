"""Real database outages for tests: the PostgreSQL server the suite runs on stopped and started
again (scripts/pg-server, as CI starts it), and SQLite files made immutable (`chattr +i`)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir


class PgServer:
    """The server of scripts/pg-server in DUCTILE_PG_DIR (its default when unset), which a test may
    stop and start: only when it is the one DATABASE_URL names (its postmaster.pid says the port)."""

    def __init__(self, directory: Path, port: int):
        self.directory, self.port = directory, port

    @classmethod
    def of_the_suite(cls) -> PgServer:
        """The suite's server, or the test is skipped: on SQLite, or a server this suite did not start."""
        url = os.environ.get("DATABASE_URL", "")
        if not url.startswith("postgres"):
            pytest.skip("PostgreSQL: a server to stop and start")
        directory = Path(os.environ.get("DUCTILE_PG_DIR", "/tmp/ductile-test-pg"))
        port = urlsplit(url).port or 5432
        try:
            lines = (directory / "data" / "postmaster.pid").read_text().splitlines()
        except OSError:
            pytest.skip(f"no server of scripts/pg-server runs in {directory} (set DUCTILE_PG_DIR to the suite's)")
        if len(lines) < 4 or lines[3].strip() != str(port):
            pytest.skip(f"the server in {directory} is not the one on port {port} that DATABASE_URL names")
        return cls(directory, port)

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
        PgServer.of_the_suite()
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
        with PgServer.of_the_suite().stopped(seconds):
            yield
        return
    with immutable(ledger_files(cfg)):
        yield
        time.sleep(max(0.0, seconds - (time.monotonic() - began)))
