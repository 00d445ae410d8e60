"""The WAL is checkpointed by the daemon after every CHECKPOINT_AFTER_JOBS claims, off the commit
path (gateway/storage/checkpoints.py), and no longer inside a worker's COMMIT: every connection's
automatic checkpoint is only a backstop at WAL_AUTOCHECKPOINT_PAGES."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

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


def test_the_checkpoint_copies_the_wal_into_the_file_after_enough_jobs(config_dir, tmp_path):
    database = str(tmp_path / "ledger.db")
    proc = start_script(SCRIPT, script_env(config_dir, Path(database)))
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = json.loads(proc.stdout.readline() or "null")
        assert first == {"autocheckpoint": 4000, "ran": [False, False]}, first
        # Three enqueues are in the WAL only: the backstop is far, and no checkpoint was due.
        assert jobs_in_the_file_alone(database, tmp_path) == 0
        proc.stdin.write("\n")
        proc.stdin.flush()
        second = json.loads(proc.stdout.readline() or "null")
        assert second == {"ran": [False, False, True, False]}, second
        assert jobs_in_the_file_alone(database, tmp_path) == 3
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
