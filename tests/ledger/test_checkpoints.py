"""The WAL is checkpointed by the daemon after every CHECKPOINT_AFTER_JOBS claims, off the commit
path (gateway/storage/checkpoints.py), and no longer inside a worker's COMMIT: every connection's
automatic checkpoint is only a backstop at WAL_AUTOCHECKPOINT_PAGES."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from tests.support import script_env, start_script

SCRIPT = """
import json, sys
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from django.db import connection
from gateway.storage.database import ensure_schema
ensure_schema()
from gateway.storage.checkpoints import CHECKPOINT_AFTER_JOBS, Checkpointer
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter

checkpoints = Checkpointer()
with connection.cursor() as cursor:
    cursor.execute("PRAGMA wal_autocheckpoint")
    autocheckpoint = cursor.fetchone()[0]
ran = [checkpoints.after(0)]
for n in range(3):
    Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0)
ran.append(checkpoints.after(CHECKPOINT_AFTER_JOBS - 1))  # not yet
print(json.dumps({"autocheckpoint": autocheckpoint, "ran": ran}), flush=True)
sys.stdin.readline()  # the test reads the database file alone now
ran.append(checkpoints.after(CHECKPOINT_AFTER_JOBS))
ran.append(checkpoints.after(CHECKPOINT_AFTER_JOBS + 1))  # the next is CHECKPOINT_AFTER_JOBS later
print(json.dumps({"ran": ran}), flush=True)
sys.stdin.readline()
"""


def jobs_in_the_file_alone(database: str, tmp_path) -> int:
    """The jobs the database file holds without its WAL: what checkpoints have copied into it."""
    copy = tmp_path / "copy.db"
    copy.write_bytes(Path(database).read_bytes())
    with closing(sqlite3.connect(copy)) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'job_queue'").fetchone():
            return 0  # even the schema is still in the WAL only
        return db.execute("SELECT count(*) FROM job_queue").fetchone()[0]


@contextmanager
def script(text: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A script the test steps through: it prints a JSON line, then waits for an empty one."""
    proc = start_script(text, env)
    try:
        yield proc
        go_on(proc)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def said(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    return json.loads(proc.stdout.readline() or "null")


def go_on(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()


def test_the_checkpoint_copies_the_wal_into_the_file_after_enough_jobs(config_dir, tmp_path):
    database = str(tmp_path / "ledger.db")
    with script(SCRIPT, script_env(config_dir, Path(database))) as proc:
        first = said(proc)
        assert first == {"autocheckpoint": 4000, "ran": [False, False]}, first
        # Three enqueues are in the WAL only: the backstop is far, and no checkpoint was due.
        assert jobs_in_the_file_alone(database, tmp_path) == 0
        go_on(proc)
        second = said(proc)
        assert second == {"ran": [False, False, True, False]}, second
        assert jobs_in_the_file_alone(database, tmp_path) == 3


# Writers that never stop, as a busy daemon's threads: a PASSIVE pass alone never copies all of
# the log, so the log starts over only if a second pass finishes it with the writers held off.
BUSY_SCRIPT = """
import json, threading, time
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from django.db import connection
from gateway.storage.database import ensure_schema
ensure_schema()
from gateway.storage.checkpoints import CHECKPOINT_AFTER_JOBS, Checkpointer
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
from ledger.writes import checkpoints_elsewhere

WAL = connection.settings_dict["NAME"] + "-wal"
def log_generation():
    with open(WAL, "rb") as wal:
        return wal.read(24)[12:].hex()  # the checkpoint sequence and salts: new at each start-over

def enqueue():
    Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI, payload={"pad": "x" * 2000}), default_dedupe_ttl=0)

stop = threading.Event()
committed = []
def writer():
    while not stop.is_set():
        enqueue()
        committed.append(1)

with checkpoints_elsewhere():
    for _ in range(200):
        enqueue()
    before = log_generation()
    thread = threading.Thread(target=writer)
    thread.start()
    while len(committed) < 20:
        time.sleep(0.001)
    ran = Checkpointer().after(CHECKPOINT_AFTER_JOBS)
    seen = len(committed)
    while len(committed) < seen + 5:  # the writer's next commits, after the checkpoint
        time.sleep(0.001)
    stop.set()
    thread.join()
    after = log_generation()
    connection.close()
print(json.dumps({"ran": ran, "started_over": before != after}), flush=True)
"""


def test_a_checkpoint_among_busy_writers_lets_the_log_start_over(config_dir, tmp_path):
    database = tmp_path / "ledger.db"
    proc = subprocess.run(
        [sys.executable, "-c", BUSY_SCRIPT],
        env=script_env(config_dir, database),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"ran": True, "started_over": True}


# Enough commits to pass WAL_AUTOCHECKPOINT_PAGES: while the process checkpoints elsewhere none of
# them copies the log into the file; afterwards a commit past the length does again.
BACKSTOP_SCRIPT = """
import json, sys
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from gateway.storage.database import ensure_schema
ensure_schema()
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
from ledger.writes import checkpoints_elsewhere

def enqueue(n):
    for _ in range(n):
        Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI, payload={"pad": "x" * 3000}), default_dedupe_ttl=0)

with checkpoints_elsewhere():
    enqueue(1500)
    print(json.dumps({"phase": "elsewhere"}), flush=True)
    sys.stdin.readline()
enqueue(1500)
print(json.dumps({"phase": "after"}), flush=True)
sys.stdin.readline()
"""


def test_commits_never_checkpoint_while_the_process_does_it_itself(config_dir, tmp_path):
    database = str(tmp_path / "ledger.db")
    with script(BACKSTOP_SCRIPT, script_env(config_dir, Path(database))) as proc:
        assert said(proc) == {"phase": "elsewhere"}
        # 1,500 jobs of ~3 KB: more than 4,000 pages of log, none of it copied by a commit.
        assert Path(database + "-wal").stat().st_size > 4000 * 4096
        assert jobs_in_the_file_alone(database, tmp_path) == 0
        go_on(proc)
        assert said(proc) == {"phase": "after"}
        assert jobs_in_the_file_alone(database, tmp_path) > 0  # the backstop is back
