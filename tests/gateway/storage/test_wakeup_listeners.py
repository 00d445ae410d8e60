"""Wake-ups on one SQLite ledger across processes (gateway/storage/wake_listener.py): a listener is called
once per enqueue, at once after the commit when the enqueue is its own process's, and through its
socket when another process enqueued. Its own process never pokes it through the socket too: that
was a second wake-up of every idle worker thread per pipeline hop (docs/performance-history.md, "Pipeline")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.checkout import REPO
from tests.support.processes import script_env, start_script

pytestmark = pytest.mark.process

LISTENER = """
import json, sys, threading, time
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from gateway.storage.database import ensure_schema
ensure_schema()
from gateway.storage.wake_listener import WakeListener
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter

calls = []
listener = WakeListener(lambda: calls.append(threading.current_thread().name))
listener.start()
Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0)
at_return = list(calls)
time.sleep(0.5)  # a poke through the socket would have arrived by now
after_wait = list(calls)
print("ready", flush=True)
sys.stdin.readline()  # the other process enqueues now
deadline = time.monotonic() + 10
while len(calls) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
final = list(calls)
listener.stop()
print(json.dumps({"at_return": at_return, "after_wait": after_wait, "final": final}), flush=True)
"""

ENQUEUER = """
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0)
"""


def test_a_listener_hears_its_own_process_directly_and_others_through_its_socket(config_dir, tmp_path):
    env = script_env(config_dir, tmp_path / "ledger.db")
    listener = start_script(LISTENER, env)
    try:
        assert listener.stdout is not None and listener.stdin is not None
        first = listener.stdout.readline().strip()
        assert first == "ready", first  # a warning instead: no socket, nothing to test
        enqueued = subprocess.run(
            [sys.executable, "-c", ENQUEUER], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert enqueued.returncode == 0, enqueued.stderr
        listener.stdin.write("go\n")
        listener.stdin.flush()
        seen = json.loads(listener.stdout.readline())
    finally:
        listener.kill()
        listener.wait()
    # Its own enqueue: called on the enqueuing thread before enqueue returned, and only then.
    assert seen["at_return"] == ["MainThread"]
    assert seen["after_wait"] == ["MainThread"], "its own enqueue also reached it through its socket"
    # The other process's enqueue: through the socket, on the listener's thread.
    assert seen["final"] == ["MainThread", "ductile-wake"]


POKED_BEFORE_COMMIT = """
import json, os, socket
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from gateway.storage.database import ensure_schema
ensure_schema()
from gateway.storage.wake_listener import wake_directory
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter
from ledger.writes.transaction import writing

directory = wake_directory()
directory.mkdir(mode=0o700, parents=True, exist_ok=True)
# Another process's worker socket: named after a pid that is not this one.
path = str(directory / f"{os.getpid() + 1}-test.sock")
worker = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
worker.bind(path)
worker.setblocking(False)
def poked():
    try:
        return worker.recv(16) != b""
    except BlockingIOError:
        return False
with writing():
    Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=0)
    inside = poked()  # the enqueue's transaction is still open: the gate is held, nothing committed
refused = Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI, refusal="no"), default_dedupe_ttl=0)
refused_poke = poked()
worker.close()
os.unlink(path)
print(json.dumps({"inside": inside, "refused": refused_poke}))
"""


def test_another_process_s_workers_are_poked_before_the_enqueue_commits(config_dir, tmp_path):
    """Waking another process's idle thread takes about as long as the enqueue's commit: the poke
    goes first, and the woken thread waits for the write gate (docs/architecture.md, "Wake-ups").
    A job recorded dead at once (a refused hop) wakes nobody."""
    env = script_env(config_dir, tmp_path / "ledger.db")
    run = subprocess.run(
        [sys.executable, "-c", POKED_BEFORE_COMMIT], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {"inside": True, "refused": False}


# Binds a waiter's socket (named for another process) right after a poke listed the directory, and
# again after the listing has aged; each must hear the next poke.
LATE_WAITER = """
import os, socket, time
import django
from gateway.bootstrap import prepare_process
prepare_process(None)
django.setup()
from gateway.storage.wake_listener import poke_local_waiters, wake_directory

directory = wake_directory()
directory.mkdir(mode=0o700, parents=True, exist_ok=True)

def waiter(name):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(directory / f"1-{name}.wait"))
    sock.settimeout(2)
    return sock

def heard(sock):
    try:
        return sock.recv(8) == b"!"
    except TimeoutError:
        return False

first = waiter("first")
poke_local_waiters()  # lists the directory just after the bind
print("first", heard(first))
# A bind in the same coarse clock tick as the listing leaves the directory's mtime as it was:
# made certain here by putting the mtime back.
before = os.stat(directory)
quick = waiter("quick")
os.utime(directory, ns=(before.st_atime_ns, before.st_mtime_ns))
poke_local_waiters()
print("quick", heard(quick))
time.sleep(0.2)
poke_local_waiters()  # a listing taken well after the last change: kept while the mtime stands
late = waiter("late")
poke_local_waiters()
print("late", heard(late))
"""


def test_a_waiter_that_binds_just_after_a_poke_hears_the_next_one(config_dir, tmp_path):
    # gateway.storage.wake_listener keeps the directory's listing while its mtime stands; a socket bound
    # in the same clock tick as the listing must not be missed for it.
    env = script_env(config_dir, tmp_path / "ledger.db")
    proc = subprocess.run(
        [sys.executable, "-c", LATE_WAITER], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.split() == ["first", "True", "quick", "True", "late", "True"], proc.stderr
