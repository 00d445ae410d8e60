"""Exclusive thread-CPU and wall clocks around named calls, for the diagnostic wrappers
_profile_daemon.py (runworkers) and _profile_gunicorn.py (the API). Not an entry point.

`patch(owner, attr, name)` replaces a function or method with one that adds its *exclusive* time
(its own time minus that of the patched calls made inside it, so sections add up) to `name`:
CPU from `time.thread_time_ns` (user + system time of the calling thread, GIL-released C code
such as SQLite's and the kernel's fork/exec included) and wall from `time.perf_counter_ns`. A
wall much larger than the CPU is waiting: for a lock, SQLite, a child process, a CPU, or the GIL.

Why clocks and not a sampling profiler: py-spy's `--gil` sees only Python code holding the GIL
(under half of the daemon's CPU: SQLite, fork/exec and pipe I/O release it), and its native
on-CPU mode slows the daemon about fivefold, which changes the lock hand-overs being measured.
Each wrapper costs about 1 µs.

Inside a `request()` block, every section's exclusive wall is also added to that request's own
tally, so a slow request says where it waited.
"""

from __future__ import annotations

import fcntl
import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_totals: dict[str, list[int]] = {}  # section -> [calls, cpu_ns, wall_ns] (exclusive)
_requests: list[dict[str, int]] = []
_lock = threading.Lock()
_local = threading.local()
_start = os.times()
_start_wall = time.perf_counter_ns()


def _add(name: str, cpu: int, wall: int) -> None:
    with _lock:
        row = _totals.setdefault(name, [0, 0, 0])
        row[0] += 1
        row[1] += cpu
        row[2] += wall
    tally = getattr(_local, "request", None)
    if tally is not None:
        tally[name] = tally.get(name, 0) + wall
        tally["cpu in sections"] = tally.get("cpu in sections", 0) + cpu


def _stack() -> list[list[int]]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def section(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, with its exclusive thread CPU and wall time added to `name`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stack = _stack()
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


@contextmanager
def request() -> Iterator[None]:
    """One unit of work (an HTTP request) whose sections are also tallied on their own."""
    tally: dict[str, int] = {"start_ns": time.time_ns()}  # to pick a phase's requests
    _local.request = tally
    c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    try:
        yield
    finally:
        tally["cpu"] = time.thread_time_ns() - c0
        tally["wall"] = time.perf_counter_ns() - w0
        _local.request = None
        with _lock:
            _requests.append(tally)


class _TimedLock:
    """ledger.writes.gate.process_lock with its acquisition timed (the in-process half of the write gate)."""

    def __init__(self, lock: Any):
        self._inner = lock
        self.acquire = section("write gate: thread lock wait", lock.acquire)

    def __enter__(self) -> bool:
        return bool(self.acquire())

    def __exit__(self, *exc: object) -> None:
        self._inner.release()


class _Fcntl:
    """`fcntl` as ledger.writes.gate sees it, with its `flock` timed; every other name is fcntl's."""

    flock = staticmethod(section("write gate: flock", fcntl.flock))

    def __getattr__(self, name: str) -> Any:
        return getattr(fcntl, name)


def install_ledger() -> None:
    """The sections every gateway process shares: the write gate, BEGIN, COMMIT, the on_commit
    wake-up pokes, logging. Call after django.setup()."""
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteWrapper

    from ledger import job_notifications
    from ledger.writes import gate

    patch(SQLiteWrapper, "_start_transaction_under_autocommit", "sqlite: BEGIN IMMEDIATE")
    patch(BaseDatabaseWrapper, "commit", "sqlite: COMMIT")
    patch(job_notifications, "_call_listeners", "wake-ups: on_commit pokes (datagram sockets)")
    patch(logging.Logger, "_log", "logging (format, JSON, write)")
    gate.process_lock = _TimedLock(gate.process_lock)  # type: ignore[assignment]
    gate.fcntl = _Fcntl()  # type: ignore[assignment]


def report() -> dict[str, Any]:
    end = os.times()
    with _lock:
        sections = {k: {"calls": v[0], "cpu_ns": v[1], "wall_ns": v[2]} for k, v in _totals.items()}
        requests = list(_requests)
    return {
        "pid": os.getpid(),
        "process_cpu_ns": round((end.user + end.system - _start.user - _start.system) * 1e9),
        "process_system_ns": round((end.system - _start.system) * 1e9),
        "wall_ns": time.perf_counter_ns() - _start_wall,
        "sections": sections,
        "requests": requests,
    }
