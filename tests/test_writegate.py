"""The SQLite write gate (gateway/writegate.py): writers of different processes take turns at the
gate instead of in SQLite's busy handler; on PostgreSQL it is not taken at all."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from django.db import connection

from gateway.writegate import sqlite_writer
from tests.support import REPO

# Enters the gate on the database of $DATABASE_URL, says so, holds it for argv[1] seconds, and
# prints how long entering took.
WRITER = """
import sys, time
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from gateway.writegate import sqlite_writer
started = time.monotonic()
with sqlite_writer():
    print(f"entered after {time.monotonic() - started:.3f}", flush=True)
    time.sleep(float(sys.argv[1]))
"""


def writer(config_dir, database, hold: float) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "DUCTILE_DB_PATH"}
    env.update(PYTHONPATH=str(REPO), DUCTILE_CONFIG_DIR=str(config_dir.path), DATABASE_URL=f"sqlite:///{database}")
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(hold)], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True
    )


def entered_after(proc: subprocess.Popen[str]) -> float:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("entered after "), line
    return float(line.split()[-1])


def test_a_writer_waits_at_the_gate_while_another_process_holds_it(config_dir, tmp_path):
    config_dir.write()
    database = tmp_path / "ledger.db"
    database.touch()
    holder = writer(config_dir, database, 1.5)
    try:
        assert entered_after(holder) < 1
        waiter = writer(config_dir, database, 0)
        assert 0.5 < entered_after(waiter) < 10  # it entered only when the holder let go
        waiter.wait(timeout=30)
    finally:
        holder.wait(timeout=30)
    assert holder.returncode == 0 and waiter.returncode == 0
    assert entered_after(writer(config_dir, database, 0)) < 0.5  # free again
    assert (tmp_path / "ledger.db.write-gate").exists()  # the gate file, beside the database


@pytest.mark.postgres
def test_other_backends_never_wait_at_the_gate():
    if connection.vendor == "sqlite":
        pytest.skip("PostgreSQL only")
    with sqlite_writer():
        started = time.monotonic()
        with sqlite_writer():  # not re-entrant on SQLite: here it is simply not taken
            assert time.monotonic() - started < 0.1
