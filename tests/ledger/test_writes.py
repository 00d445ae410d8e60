"""The ledger's write transactions (ledger/writes/): writers of different processes take turns at
the SQLite write gate instead of in SQLite's busy handler; the ledger's write methods take it
themselves, so no caller can forget; a write inside a transaction opened without it is refused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection, transaction

from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
from ledger.writes.transaction import UngatedTransaction, writing
from tests.support.checkout import REPO
from tests.support.processes import script_env

# Enters the gate on the database of $DATABASE_URL and says when (time.time_ns); with argv[1]
# "hold", stays in until a line arrives on stdin and says when it leaves.
WRITER = """
import sys, time
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from ledger.writes.transaction import writing
print("trying", flush=True)
with writing():
    print(f"entered {time.time_ns()}", flush=True)
    if sys.argv[1] == "hold":
        sys.stdin.readline()
        print(f"leaving {time.time_ns()}", flush=True)
"""


def writer(config_dir, database, mode: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "DUCTILE_DB_PATH"}
    env.update(PYTHONPATH=str(REPO), DUCTILE_CONFIG_DIR=str(config_dir.path), DATABASE_URL=f"sqlite:///{database}")
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, mode],
        env=env,
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def said(proc: subprocess.Popen[str], word: str) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line and line[0] == word, line
    return int(line[1]) if len(line) > 1 else 0


@pytest.mark.process
def test_a_writer_waits_at_the_gate_until_another_process_leaves_it(config_dir, tmp_path):
    config_dir.write()
    database = tmp_path / "ledger.db"
    holder = writer(config_dir, database, "hold")
    waiter = None
    try:
        said(holder, "trying")
        said(holder, "entered")
        waiter = writer(config_dir, database, "pass")
        said(waiter, "trying")
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        left = said(holder, "leaving")
        # Had the gate not held it, the waiter would have entered before the holder was told to go.
        assert said(waiter, "entered") >= left
    finally:
        for proc in (holder, waiter):
            if proc is not None:
                proc.communicate(timeout=60)
    assert holder.returncode == 0 and waiter is not None and waiter.returncode == 0
    assert (tmp_path / "ledger.db.write-gate").exists()  # the gate file, beside the database


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_ledger_write_joins_an_outer_writing_block():
    with writing():
        first = Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=60).job_id
        with writing():
            second = Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=60).job_id
    assert set(Job.objects.values_list("id", flat=True)) == {first, second}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_ledger_write_inside_an_ungated_transaction_is_refused_on_every_backend():
    with pytest.raises(UngatedTransaction, match=r"writing\(\)"), transaction.atomic():
        Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=60)
    assert not Job.objects.exists()
    assert not connection.in_atomic_block


# Inside a write transaction, asks for a wake-up; the listener says whether the gate was free when
# it ran (a second open of the gate file can take it only when no writer holds it).
POKER = """
import fcntl, os
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from django.db import connection
from ledger import job_notifications
from ledger.writes.transaction import writing

def listener():
    fd = os.open(connection.settings_dict["NAME"] + ".write-gate", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("free", flush=True)
    except BlockingIOError:
        print("held", flush=True)
    finally:
        os.close(fd)

job_notifications.add_listener(listener)
with writing():
    job_notifications.notify_enqueued()
    print("committing", flush=True)
print("done", flush=True)
"""


@pytest.mark.process
def test_wake_ups_run_after_the_gate_is_released_not_inside_it(config_dir, tmp_path):
    env = script_env(config_dir, tmp_path / "ledger.db")
    proc = subprocess.run([sys.executable, "-c", POKER], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["committing", "free", "done"], proc.stderr


# Two threads write in turns; each says which SQLite connection its transactions ran on and which
# it holds outside them. Then a transaction fails on the database, and the next one still commits.
LENDER = """
import threading
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from django.db import DatabaseError, connection
from gateway.storage.database import ensure_schema
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
from ledger.writes.transaction import writing

ensure_schema()
seen = {}

def work(name):
    connection.ensure_connection()
    own, inside = connection.connection, []
    for _ in range(3):
        with writing():
            inside.append(connection.connection)
            Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0)
    seen[name] = (own, inside, connection.connection)
    connection.close()

threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
for t in threads: t.start()
for t in threads: t.join()
(own_a, in_a, after_a), (own_b, in_b, after_b) = seen["a"], seen["b"]
lent = in_a[0]
print("one-lent", all(c is lent for c in in_a + in_b))
print("own-kept", own_a is after_a and own_b is after_b and lent is not own_a and lent is not own_b)
try:
    with writing():
        connection.cursor().execute("INSERT INTO no_such_table VALUES (1)")
except DatabaseError:
    print("failed")
with writing():
    fresh = connection.connection
    Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0)
print("fresh", fresh is not lent)
print("jobs", Job.objects.count())
"""


@pytest.mark.process
def test_a_process_writes_through_one_connection_lent_to_each_thread_in_turn(config_dir, tmp_path):
    # Why one (ledger.writes.write_connection): a connection that begins a transaction after
    # another connection wrote drops its whole page cache and reads every page again.
    env = script_env(config_dir, tmp_path / "ledger.db")
    proc = subprocess.run([sys.executable, "-c", LENDER], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["one-lent", "True", "own-kept", "True", "failed", "fresh", "True", "jobs", "7"], (
        proc.stderr
    )


# The outermost transaction on the lent connection (ledger.writes.transaction._lent_transaction) keeps what
# `transaction.atomic()` promises: nested blocks as savepoints, commit hooks after a commit only,
# a transaction marked for rollback rolled back, an error's transaction gone whole.
OUTERMOST = """
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from django.db import IntegrityError, connection, transaction
from gateway.storage.database import ensure_schema
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
from ledger.writes.transaction import writing

ensure_schema()
hooks = []

def enqueue():
    return Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0).job_id

with writing():
    kept = enqueue()
    try:
        with transaction.atomic():
            enqueue()
            raise IntegrityError("a nested block fails")
    except IntegrityError:
        pass
    transaction.on_commit(lambda: hooks.append(("committed", Job.objects.filter(pk=kept).exists())))
    print("inside-atomic", connection.in_atomic_block, connection.get_autocommit())
print("savepoint", Job.objects.count(), hooks)

try:
    with writing():
        enqueue()
        transaction.on_commit(lambda: hooks.append("never"))
        raise KeyError("not a database error")
except KeyError:
    pass
print("error", Job.objects.count(), hooks)

with writing():
    enqueue()
    try:
        with writing(savepoint=False):
            raise ValueError("ends the whole transaction")
    except ValueError:
        pass
print("marked", Job.objects.count(), connection.in_atomic_block, connection.get_autocommit())

with writing():
    enqueue()
print("after", Job.objects.count())
"""


@pytest.mark.process
def test_the_outermost_write_transaction_keeps_what_atomic_promises(config_dir, tmp_path):
    env = script_env(config_dir, tmp_path / "ledger.db")
    proc = subprocess.run(
        [sys.executable, "-c", OUTERMOST], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.splitlines() == [
        "inside-atomic True False",
        "savepoint 1 [('committed', True)]",
        "error 1 [('committed', True)]",
        "marked 1 False True",
        "after 2",
    ], proc.stderr


# A statement that fails inside the lent write connection's transaction, its error kept alive (as
# a traceback in a cycle keeps it until a garbage collection): the transaction must still end and
# let go of SQLite's write lock at once, for this process's next writer and for other processes.
FAILED_KEPT = """
import gc, sqlite3, sys
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from django.db import DatabaseError, connection
from gateway.storage.database import ensure_schema
from ledger import sql
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
from ledger.writes.transaction import writing

ensure_schema()
gc.disable()
kept = []
try:
    with writing():
        Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0)
        # Fails as SQLite steps the statement (a CHECK), so a prepared statement is left behind.
        sql.execute("UPDATE job_queue SET payload = ?", ["{not json"])
except DatabaseError as exc:
    kept.append(exc)
other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.5, isolation_level=None)
try:
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    print("other-process-writes", True)
except sqlite3.OperationalError as exc:
    print("other-process-writes", exc)
with writing():
    Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0)
print("jobs", Job.objects.count())
"""


@pytest.mark.process
def test_a_failed_write_transaction_lets_go_of_the_write_lock_while_its_error_lives(config_dir, tmp_path):
    env = script_env(config_dir, tmp_path / "ledger.db")
    proc = subprocess.run(
        [sys.executable, "-c", FAILED_KEPT], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.split() == ["other-process-writes", "True", "jobs", "1"], proc.stderr[-2000:]
