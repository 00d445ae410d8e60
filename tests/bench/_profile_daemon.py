"""Diagnostic wrapper for `bench_profile.py` (not an entry point of its own).

    BENCH_PROFILE_FILE=OUT python tests/bench/_profile_daemon.py manage.py runworkers --config-dir DIR ...

Runs the real `runworkers` in this process with clock readings around the calls a worker makes
per job, and writes, at exit, one JSON document to $BENCH_PROFILE_FILE: per section, its calls and
its *exclusive* thread CPU (`time.thread_time_ns`: user + system time of the calling thread,
GIL-released C code such as SQLite's and the kernel's fork/exec included) and wall time (a
section's time minus that of the sections called inside it, so the sections add up), plus the
process's own CPU (`os.times`) over the same span, so that what no section covers shows.

Why thread CPU and not a sampling profiler: py-spy's `--gil` sees only Python code holding the
GIL (under half of this daemon's CPU: SQLite, fork/exec and pipe I/O release it), and its
native on-CPU mode slows the daemon about fivefold, which changes the lock hand-overs it means to
measure. These wrappers cost about 1 µs each, some 20 per job.

The product code is not changed; nothing here is imported by it.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from gateway.bootstrap import config_dir_from_argv, prepare_process

argv = sys.argv[1:]  # manage.py runworkers ...
prepare_process(config_dir_from_argv(argv[1:]))

import django  # noqa: E402

django.setup()

import fcntl  # noqa: E402
import logging  # noqa: E402

from django.core.management import execute_from_command_line  # noqa: E402
from django.db.backends.base.base import BaseDatabaseWrapper  # noqa: E402
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteWrapper  # noqa: E402

from gateway.cli.main import strip_config_dir  # noqa: E402
from gateway.execution import dispatch, runner, workers  # noqa: E402
from gateway.plugins.seal import PluginSeal  # noqa: E402
from ledger import wakeups, writes  # noqa: E402
from ledger.models import Job, JobLog, JobTransition, PluginState  # noqa: E402
from ledger.models.jobs import JobQuerySet  # noqa: E402

_totals: dict[str, list[int]] = {}  # section -> [calls, cpu_ns, wall_ns] (exclusive)
_totals_lock = threading.Lock()
_local = threading.local()


def _add(name: str, cpu: int, wall: int) -> None:
    with _totals_lock:
        row = _totals.setdefault(name, [0, 0, 0])
        row[0] += 1
        row[1] += cpu
        row[2] += wall


def section(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, with its exclusive thread CPU and wall time added to `name`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append([0, 0])  # time spent in sections nested inside this one
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            cpu, wall = time.thread_time_ns() - c0, time.perf_counter_ns() - w0
            inner = stack.pop()
            _add(name, cpu - inner[0], wall - inner[1])
            if stack:
                stack[-1][0] += cpu
                stack[-1][1] += wall

    return wrapper


def patch(owner: Any, attr: str, name: str) -> None:
    wrapped = section(name, getattr(owner, attr))
    if isinstance(inspect.getattr_static(owner, attr), classmethod | staticmethod):
        wrapped = staticmethod(wrapped)  # already bound to the class by getattr
    setattr(owner, attr, wrapped)


class _TimedLock:
    """writes._lock with its acquisition timed (the in-process half of the write gate)."""

    def __init__(self, lock: Any):
        self._inner = lock
        self.acquire = section("write gate: thread lock wait", lock.acquire)

    def __enter__(self) -> bool:
        return bool(self.acquire())

    def __exit__(self, *exc: object) -> None:
        self._inner.release()


class _Fcntl:
    flock = staticmethod(section("write gate: flock", fcntl.flock))
    LOCK_EX, LOCK_UN = fcntl.LOCK_EX, fcntl.LOCK_UN


patch(workers.WorkerDaemon, "_work", "worker loop (claim look, counters, wake-ups)")
patch(workers.WorkerDaemon, "_main_loop", "main thread: loop, joins")
patch(workers.WorkerDaemon, "_beat", "main thread: heartbeat")
patch(workers.WorkerDaemon, "_recover", "main thread: recovery pass")
patch(workers.WorkerDaemon, "wake", "wake-ups: in-process notify")
patch(JobQuerySet, "claim_next", "claim: claim_next (ORM/SQL, excl. gate, BEGIN, COMMIT)")
patch(JobTransition, "record", "ledger: transition INSERT")
patch(Job, "record_outcome", "completion: record_outcome (excl. the parts below)")
patch(Job, "move", "completion: move (status UPDATE)")
patch(JobLog, "record", "completion: job_log INSERT")
patch(PluginState, "current", "preflight: PluginState.current")
patch(PluginSeal, "check", "preflight: plugin seal check")
patch(dispatch, "build_request", "preflight: build_request (JSON)")
patch(dispatch, "judge", "judge the response (JSON)")
patch(dispatch.Executor, "_execute", "executor: rest (position, refusal, context, outcome)")
patch(dispatch.Executor, "_record", "executor: _record (hooks, result log line)")
patch(runner, "run_plugin", "plugin: run_plugin rest (env dict, lifeline)")
patch(runner.subprocess, "Popen", "plugin: spawn (Popen: fork/exec)")
patch(runner._Exchange, "run", "plugin: exchange (pipes, pidfd, wait, reap)")
patch(runner, "sweep_adopted", "plugin: sweep_adopted (/proc children)")
patch(logging.Logger, "_log", "logging (format, JSON, write)")
patch(wakeups, "_call_listeners", "wake-ups: on_commit pokes (datagram sockets)")
patch(SQLiteWrapper, "_start_transaction_under_autocommit", "sqlite: BEGIN IMMEDIATE")
patch(BaseDatabaseWrapper, "commit", "sqlite: COMMIT")
writes._lock = _TimedLock(writes._lock)  # type: ignore[assignment]
writes.fcntl = _Fcntl  # type: ignore[assignment]

_start = os.times()
_start_wall = time.perf_counter_ns()


@atexit.register
def _dump() -> None:
    end = os.times()
    result = {
        "process_cpu_ns": round((end.user + end.system - _start.user - _start.system) * 1e9),
        "process_user_ns": round((end.user - _start.user) * 1e9),
        "process_system_ns": round((end.system - _start.system) * 1e9),
        "wall_ns": time.perf_counter_ns() - _start_wall,
        "sections": {k: {"calls": v[0], "cpu_ns": v[1], "wall_ns": v[2]} for k, v in _totals.items()},
    }
    with open(os.environ["BENCH_PROFILE_FILE"], "w") as out:
        json.dump(result, out, indent=1)


execute_from_command_line(strip_config_dir(argv))
