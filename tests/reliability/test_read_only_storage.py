"""A ledger that cannot be written is not a full disk (issue 33, item 9). Files made immutable
(chattr +i), a file system remounted read-only, and a PostgreSQL server that accepts no writes are
each said to be read-only, naming what cannot be written, by every message that names the cause:
the API's 503, the daemons' logs and the CLI's error. A full disk still says so
(tests/reliability/test_disk_full.py). Real files, real mounts, a real server."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.live_api import live_api
from tests.support.outages import can_make_immutable, immutable, ledger_files
from tests.support.processes import ductile
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.process]

TOKEN = "tok-ro"


@contextmanager
def tmpfs(directory: Path) -> Iterator[Path]:
    directory.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=50m,mode=0700", "tmpfs", str(directory)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root (CI runs as root): {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(directory)], check=True)


@contextmanager
def remounted_read_only(directory: Path) -> Iterator[None]:
    subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(directory)], check=True, capture_output=True)


def test_an_immutable_ledger_is_called_read_only_by_the_api_the_daemons_and_the_cli(config_dir):
    cfg = config_dir
    cfg.db_path.parent.mkdir(parents=True)
    can_make_immutable(cfg.db_path.parent)
    words = f"{cfg.db_path} cannot be written"
    cfg.service["lease_ttl"] = "5s"  # a heartbeat every 1.25 s: the daemon meets it at once
    tokens = [{"name": "t", "token": TOKEN, "scopes": ["*"]}]
    with live_api(cfg, tokens, workers=True) as live:

        def enqueue() -> tuple[int, dict]:
            return live.api.call("POST", "/plugin/echo/poll", {}, token=TOKEN)

        live.output.wait_for("runworkers started")
        assert enqueue()[0] == 202
        with immutable(ledger_files(cfg)):
            # Several: each process's first write and the ones after it meet the files differently.
            refusals = [enqueue() for _ in range(4)]
            for code, body in refusals:
                assert code == 503, body
                assert "its files are read-only" in body["error"] and words in body["error"], body
                assert "disk is full" not in body["error"] and "nothing was recorded" in body["error"], body
            pattern = r'"message": "heartbeat failed: the database refuses writes: ([^"]+)"'
            logged = wait_for(lambda: re.findall(pattern, live.output.text), timeout=30, what="the heartbeat to fail")
            assert "its files are read-only" in logged[0] and "disk is full" not in logged[0], logged
            cli = ductile(cfg, "plugin", "run", "echo")
            assert cli.returncode == 1, cli
            assert "its files are read-only" in cli.stderr and "disk is full" not in cli.stderr, cli.stderr
        after = wait_for(lambda: enqueue()[1].get("job_id"), timeout=30, what="the API to accept again")
        wait_for(
            lambda: live.api.call("GET", f"/job/{after}", token=TOKEN)[1]["status"] == "succeeded",
            timeout=30,
            what="a job after it to run",
        )
        live.output.wait_for("heartbeat works again")


def test_a_ledger_on_a_read_only_file_system_is_called_read_only_by_the_cli(config_dir):
    """Remounted read-only under the ledger (the kernel refuses that while a process has a file of it
    open for writing: the gateway is stopped, as after a reboot into a read-only root)."""
    cfg = config_dir
    with tmpfs(cfg.db_path.parent) as state:
        cfg.write()
        assert ductile(cfg, "plugin", "run", "echo").returncode == 0  # a ledger, with a job in it
        with remounted_read_only(state):
            cli = ductile(cfg, "plugin", "run", "echo")
            assert cli.returncode == 1, cli
            assert f"its files are read-only: {cfg.db_path} is on a read-only file system" in cli.stderr, cli.stderr
            assert "disk is full" not in cli.stderr, cli.stderr


@pytest.mark.postgres
def test_a_postgresql_server_that_accepts_no_writes_is_called_read_only(process_db):
    cfg = process_db
    if not cfg.database_url:
        pytest.skip("PostgreSQL: a server in read-only mode")
    import psycopg

    cfg.write()
    name = cfg.database_url.rsplit("/", 1)[1]
    with psycopg.connect(cfg.database_url, autocommit=True) as admin:
        assert ductile(cfg, "plugin", "run", "echo").returncode == 0  # migrates the fresh database
        admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    cli = ductile(cfg, "plugin", "run", "echo")
    assert cli.returncode == 1, cli
    assert "it is read-only" in cli.stderr and "disk is full" not in cli.stderr, cli.stderr
