"""The WAL is checkpointed by the daemon once the jobs it claimed filled about CHECKPOINT_PAGES of
it, off the commit path (gateway/storage/checkpoints.py), and no longer inside a worker's COMMIT:
every connection's automatic checkpoint is only a backstop, at WAL_AUTOCHECKPOINT_PAGES, or at
BESIDE_CHECKPOINTER_PAGES while a daemon of the host checkpoints."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from ductile_site.settings import WAL_AUTOCHECKPOINT_PAGES
from gateway.storage.checkpoints import CHECKPOINT_PAGES, IDLE_AFTER, JOBS_BETWEEN, Activity, jobs_between
from ledger.writes.autocheckpoint import BESIDE_CHECKPOINTER_PAGES
from tests.support.checkout import REPO
from tests.support.output import Output
from tests.support.processes import script_env, start_script

# Every script's start: a process of the gateway on the test's config and SQLite file.
SET_UP = """
import json, sys, threading, time
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from django.db import connection
from gateway.storage.database import ensure_schema
ensure_schema()
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter

def enqueue(n=1, pad=0):
    for _ in range(n):
        spec = JobSpec("echo", "poll", Submitter.CLI, payload={"pad": "x" * pad} if pad else {})
        Job.objects.enqueue(spec, default_dedupe_ttl=0)
"""

SCRIPT = (
    SET_UP
    + """from gateway.storage.checkpoints import FIRST_AFTER_JOBS, Checkpointer

checkpoints = Checkpointer()
with connection.cursor() as cursor:
    cursor.execute("PRAGMA wal_autocheckpoint")
    autocheckpoint = cursor.fetchone()[0]
ran = [checkpoints.after(0)]
enqueue(3)
ran.append(checkpoints.after(FIRST_AFTER_JOBS - 1))  # not yet
print(json.dumps({"autocheckpoint": autocheckpoint, "ran": ran}), flush=True)
sys.stdin.readline()  # the test reads the database file alone now
ran.append(checkpoints.after(FIRST_AFTER_JOBS))
ran.append(checkpoints.after(FIRST_AFTER_JOBS + 1))  # the next is dozens of claims later
print(json.dumps({"ran": ran}), flush=True)
sys.stdin.readline()
"""
)


def jobs_in_the_file_alone(database: str, tmp_path) -> int:
    """The jobs the database file holds without its WAL: what checkpoints have copied into it.
    The file is copied while its writers run, so a checkpoint may be writing pages into it during
    the copy: a torn copy ("malformed", met once in a full suite) is taken again."""
    copy = tmp_path / "copy.db"
    for _ in range(49):
        try:
            return _jobs_in_copy(database, copy)
        except sqlite3.DatabaseError:
            time.sleep(0.1)
    return _jobs_in_copy(database, copy)  # torn 50 times running: the test's failure


def _jobs_in_copy(database: str, copy: Path) -> int:
    copy.write_bytes(Path(database).read_bytes())
    with closing(sqlite3.connect(copy)) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'job_queue'").fetchone():
            return 0  # even the schema is still in the WAL only
        return int(db.execute("SELECT count(*) FROM job_queue").fetchone()[0])


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


@pytest.mark.process
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
BUSY_SCRIPT = (
    SET_UP
    + """from gateway.storage.checkpoints import FIRST_AFTER_JOBS, Checkpointer
from ledger.writes.autocheckpoint import checkpoints_elsewhere

WAL = connection.settings_dict["NAME"] + "-wal"
def log_generation():
    with open(WAL, "rb") as wal:
        return wal.read(24)[12:].hex()  # the checkpoint sequence and salts: new at each start-over

stop = threading.Event()
committed = []
def writer():
    while not stop.is_set():
        enqueue(pad=2000)
        committed.append(1)

with checkpoints_elsewhere():
    for _ in range(200):
        enqueue(pad=2000)
    before = log_generation()
    thread = threading.Thread(target=writer)
    thread.start()
    while len(committed) < 20:
        time.sleep(0.001)
    ran = Checkpointer().after(FIRST_AFTER_JOBS)
    seen = len(committed)
    while len(committed) < seen + 5:  # the writer's next commits, after the checkpoint
        time.sleep(0.001)
    stop.set()
    thread.join()
    after = log_generation()
    connection.close()
print(json.dumps({"ran": ran, "started_over": before != after}), flush=True)
"""
)


@pytest.mark.process
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
BACKSTOP_SCRIPT = (
    SET_UP
    + """from ledger.writes.autocheckpoint import checkpoints_elsewhere

with checkpoints_elsewhere():
    enqueue(1500, pad=3000)
    print(json.dumps({"phase": "elsewhere"}), flush=True)
    sys.stdin.readline()
enqueue(1500, pad=3000)
print(json.dumps({"phase": "after"}), flush=True)
sys.stdin.readline()
"""
)


@pytest.mark.process
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


# A checkpoint starts the log over; FIRST_AFTER_JOBS enqueues of `pad` bytes each fill it, and the
# next checkpoint, due after as many claims, measures them.
INTERVAL_SCRIPT = (
    SET_UP
    + """from gateway.storage.checkpoints import FIRST_AFTER_JOBS, Checkpointer
from ledger.writes.autocheckpoint import checkpoints_elsewhere

pad = int(sys.argv[1])
with checkpoints_elsewhere():
    assert Checkpointer().after(FIRST_AFTER_JOBS)  # the log starts over (the schema was in it)
    checkpoints = Checkpointer()
    enqueue(FIRST_AFTER_JOBS, pad=pad)
    assert checkpoints.after(FIRST_AFTER_JOBS)
print(json.dumps({"every": checkpoints.every}), flush=True)
"""
)


def interval_after(config_dir, database: Path, pad: int) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", INTERVAL_SCRIPT, str(pad)],
        env=script_env(config_dir, database),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])["every"]


@pytest.mark.process
def test_the_interval_follows_the_pages_each_job_wrote(config_dir, tmp_path):
    """Jobs that write more log are checkpointed after fewer of them: the log's length, not the
    count of jobs, is what the automatic checkpoint of the other processes must never reach."""
    small = interval_after(config_dir, tmp_path / "small.db", 10)
    large = interval_after(config_dir, tmp_path / "large.db", 12000)  # each job 3 pages more
    lowest, highest = JOBS_BETWEEN
    assert lowest <= large < small < highest, (large, small)
    # An enqueue writes ~11 pages of log: the next ~8,000 pages come from several hundred.
    assert small > 400, small


def test_a_daemon_is_idle_for_its_checkpoints_only_after_a_while_without_claims():
    activity = Activity(0, now=100.0)
    assert activity.busy(5, now=100.25)  # claims in a pass
    assert activity.busy(5, now=100.26)  # a pass woken early: none in it, jobs still flow
    assert activity.busy(5, now=100.25 + IDLE_AFTER * 0.9)
    assert not activity.busy(5, now=100.25 + IDLE_AFTER)
    assert activity.busy(6, now=200.0)  # claims again


def test_the_interval_stays_within_its_bounds():
    lowest, highest = JOBS_BETWEEN
    assert jobs_between(100, 1) == highest  # a log the jobs hardly grew: not never
    assert jobs_between(100, CHECKPOINT_PAGES * 100) == lowest  # huge jobs: not after every one
    assert jobs_between(100, 2000) == 400
    # Others' commits never checkpoint in the daemon's place: its log stays far below their backstop.
    assert CHECKPOINT_PAGES * 2 <= BESIDE_CHECKPOINTER_PAGES


# A process that writes while a daemon of the host checkpoints (`checkpoints_elsewhere` in
# another process) leaves the checkpoints to it: its COMMITs past WAL_AUTOCHECKPOINT_PAGES copy
# nothing into the file. Once the daemon is gone, they do again.
BESIDE_SCRIPT = (
    SET_UP
    + """
print(json.dumps({"phase": "ready"}), flush=True)
sys.stdin.readline()  # the daemon holds its lock now
time.sleep(1.2)  # the writer looks again (once a second)
enqueue(600, pad=3000)
print(json.dumps({"phase": "beside"}), flush=True)
sys.stdin.readline()  # the daemon has gone
time.sleep(1.2)  # the writer looks again (once a second)
enqueue(50, pad=3000)
print(json.dumps({"phase": "alone"}), flush=True)
sys.stdin.readline()
"""
)

DAEMON_SCRIPT = (
    SET_UP
    + """from ledger.writes.autocheckpoint import checkpoints_elsewhere

with checkpoints_elsewhere():
    print(json.dumps({"phase": "checkpointing"}), flush=True)
    sys.stdin.readline()
"""
)


@pytest.mark.process
def test_writers_leave_the_checkpoints_to_a_daemon_that_does_them(config_dir, tmp_path):
    database = str(tmp_path / "ledger.db")
    env = script_env(config_dir, Path(database))
    with script(BESIDE_SCRIPT, env) as writer:
        assert said(writer) == {"phase": "ready"}
        with script(DAEMON_SCRIPT, env) as daemon:
            assert said(daemon) == {"phase": "checkpointing"}
            go_on(writer)
            assert said(writer) == {"phase": "beside"}
            # 600 jobs of ~3 KB, ~15 pages of log each: past the settings' backstop, not past the
            # one beside a daemon, and none of it copied by a commit.
            assert Path(database + "-wal").stat().st_size > WAL_AUTOCHECKPOINT_PAGES * 4096
            assert jobs_in_the_file_alone(database, tmp_path) == 0
        go_on(writer)
        assert said(writer) == {"phase": "alone"}
        # The daemon is gone: the next commit past the settings' backstop copied the log.
        assert jobs_in_the_file_alone(database, tmp_path) > 600


WRITER_SCRIPT = (
    SET_UP
    + """
time.sleep(3.6)  # the daemon's idle (a second without claims) seen at a pass (1.25 s apart), then the writer's look
enqueue(600, pad=3000)
print(json.dumps({"phase": "written"}), flush=True)
sys.stdin.readline()
"""
)


@pytest.mark.process
def test_an_idle_daemon_leaves_the_checkpoints_to_the_writers(config_dir, tmp_path):
    """A `runworkers` that claims nothing (here it serves only `stress`, and the jobs are echo's)
    checkpoints nothing, so it stops announcing: the writer's COMMITs past the settings' backstop
    copy the log into the file, as with no daemon, instead of growing it to
    BESIDE_CHECKPOINTER_PAGES and copying it all in one COMMIT."""
    database = str(tmp_path / "ledger.db")
    config_dir.service["lease_ttl"] = "5s"  # the daemon's idle passes 1.25 s apart (its heartbeat)
    env = script_env(config_dir, Path(database))
    subprocess.run([sys.executable, "-c", SET_UP], env=env, check=True, timeout=60)  # the schema first
    daemon = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "runworkers", "--plugins", "stress"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = Output(daemon)
    try:
        output.wait_for("runworkers started")
        with script(WRITER_SCRIPT, env) as writer:
            assert said(writer) == {"phase": "written"}
            assert Path(database + "-wal").stat().st_size > WAL_AUTOCHECKPOINT_PAGES * 4096
            assert jobs_in_the_file_alone(database, tmp_path) > 0
    finally:
        daemon.terminate()
        assert daemon.wait(timeout=30) == 0, output.finish()


# The API's gunicorn workers: request threads write through one writer thread (`shared`), whose
# commits leave the checkpoints to a thread of their own.
SHARED_SCRIPT = (
    SET_UP
    + """from gateway.storage.checkpoints import Checkpointer, CheckpointThread
from ledger.writes import group_commit

ran_on = []
checkpoint = Checkpointer.after
def recorded(self, claimed, **options):
    ran = checkpoint(self, claimed, **options)
    if ran:
        ran_on.append(threading.current_thread().name)
    return ran
Checkpointer.after = recorded
left = []
leave = Checkpointer.left_to_another
def left_to_another(self, claimed):
    left.append(threading.current_thread().name)
    leave(self, claimed)
Checkpointer.left_to_another = left_to_another

group_commit.share_transactions()
CheckpointThread.start()
print(json.dumps({"phase": "ready"}), flush=True)
sys.stdin.readline()
for _ in range(int(sys.argv[1])):
    group_commit.shared(lambda: enqueue(pad=3000))
deadline = time.monotonic() + 10
while not (ran_on or left) and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps({"ran_on": sorted(set(ran_on)), "left_on": sorted(set(left))}), flush=True)
sys.stdin.readline()
"""
)


def shared_writer(env: dict[str, str], jobs: int):
    return script(SHARED_SCRIPT.replace("int(sys.argv[1])", str(jobs)), env)


@pytest.mark.process
def test_an_api_workers_commits_leave_the_checkpoints_to_its_checkpoint_thread(config_dir, tmp_path):
    """Its COMMITs checkpointed each time the log passed the settings' backstop, with the gate
    held and every request waiting for that commit; now a thread of its own copies the log."""
    database = str(tmp_path / "ledger.db")
    with shared_writer(script_env(config_dir, Path(database)), 1500) as writer:
        assert said(writer) == {"phase": "ready"}
        go_on(writer)
        assert said(writer) == {"ran_on": ["ductile-checkpoints"], "left_on": []}
        assert jobs_in_the_file_alone(database, tmp_path) > 0
        # 1,500 jobs of ~15 pages of log each: checkpointed every ~8,000 pages, so the log started
        # over and never grew to what they wrote.
        assert Path(database + "-wal").stat().st_size < 1500 * 15 * 4096 / 2


@pytest.mark.process
def test_an_api_worker_leaves_the_checkpoints_to_a_daemon_that_does_them(config_dir, tmp_path):
    database = str(tmp_path / "ledger.db")
    env = script_env(config_dir, Path(database))
    with shared_writer(env, 600) as writer:
        assert said(writer) == {"phase": "ready"}
        with script(DAEMON_SCRIPT, env) as daemon:
            assert said(daemon) == {"phase": "checkpointing"}
            go_on(writer)
            assert said(writer) == {"ran_on": [], "left_on": ["ductile-checkpoints"]}
            assert Path(database + "-wal").stat().st_size > WAL_AUTOCHECKPOINT_PAGES * 4096
            assert jobs_in_the_file_alone(database, tmp_path) == 0


FAILING_SCRIPT = (
    SET_UP
    + """import logging
from django.db import OperationalError
from gateway.storage.checkpoints import FIRST_AFTER_JOBS, Checkpointer, CheckpointThread
from ledger.writes import group_commit

def fails(self, claimed, **options):
    raise OperationalError("database or disk is full")
Checkpointer.after = fails
warnings = []
class Count(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("ductile.checkpoints").addHandler(Count())

group_commit.share_transactions()
CheckpointThread.start()
started = time.monotonic()
for _ in range(FIRST_AFTER_JOBS + 300):  # due from the 100th on: every commit after it asks again
    group_commit.shared(lambda: enqueue())
time.sleep(0.2)
print(json.dumps({"warnings": warnings, "seconds": time.monotonic() - started}), flush=True)
"""
)


@pytest.mark.process
def test_a_failing_checkpoint_is_retried_after_a_pause_not_at_every_commit(config_dir, tmp_path):
    """A checkpoint that fails (a full disk) says so, and the writes go on; the thread tries again
    a second later, not at each of the hundreds of commits a second meanwhile, each with a warning."""
    proc = subprocess.run(
        [sys.executable, "-c", FAILING_SCRIPT],
        env=script_env(config_dir, tmp_path / "ledger.db"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["warnings"], result
    assert set(result["warnings"]) == {"checkpoint of the ledger's log failed: database or disk is full"}
    assert len(result["warnings"]) <= result["seconds"] + 1, result
