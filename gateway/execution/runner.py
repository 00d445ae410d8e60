"""Spawning one plugin process for one command (spec 000 §5.1, §5.6; idiom 2).

The plugin gets its own process group and a clean environment; a timeout sends SIGTERM to the
whole group, waits out the grace period, then SIGKILLs the group, so grandchildren that trap
TERM die too. stdout is capped at 10 MiB, stderr at 64 KiB.

The answer is complete when the plugin process has exited and its output has been read: its
group is SIGKILLed at that moment, so a child left behind can neither run on nor hold stdout
open until the timeout (issue 12, defects 5 and 6; `gateway.execution.reaper` for the rest).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.execution.reaper import LIFELINE, sweep_adopted

STDOUT_CAP = 10 * 1024 * 1024
STDERR_CAP = 64 * 1024
KILL_GRACE = 5.0
# After the plugin exited and its group was killed, how long its pipes may stay open: only a
# process that left the group (setsid) can still hold them.
AFTER_EXIT = 1.0
# Without pidfds (Linux < 5.3), how often the exit is looked for.
_EXIT_POLL = 0.05
# Plugins run this much nicer than the gateway (and start their own children so): on a busy
# host the API answering an agent, and the daemon holding the ledger's write lock, are never
# starved by plugin processes (docs/performance.md, "API while workers drain"). An idle CPU
# still runs a plugin at full speed.
PLUGIN_NICENESS = 10
_READ_CHUNK = 65536

# Process groups of plugins running now, so a forced shutdown can kill them rather than orphan them.
LIVE_GROUPS: set[int] = set()


@dataclass
class RunResult:
    exit_code: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    stdout_overflow: bool = False
    stderr_truncated: bool = False
    spawn_error: str | None = None
    spawn_errno: int | None = None
    enter_wall_ns: int = 0
    exit_wall_ns: int = 0
    dur_ns: int = 0
    warnings: list[str] = field(default_factory=list)


def kill_live_groups() -> None:
    for pgid in list(LIVE_GROUPS):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_plugin(
    entrypoint: Path,
    request: bytes,
    *,
    timeout: float,
    env: Mapping[str, str],
    cwd: Path | None = None,
    grace: float = KILL_GRACE,
) -> RunResult:
    result = RunResult(enter_wall_ns=time.time_ns())
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [str(entrypoint)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        result.spawn_error = f"cannot start {entrypoint}: {exc.strerror or exc}"
        result.spawn_errno = exc.errno
        result.exit_wall_ns = time.time_ns()
        return result
    LIVE_GROUPS.add(proc.pid)
    LIFELINE.hold(proc.pid, LIVE_GROUPS)
    _lower_priority(proc.pid)
    try:
        _Exchange(proc, request, result, deadline=started + timeout, grace=grace).run()
    finally:
        LIVE_GROUPS.discard(proc.pid)
        LIFELINE.release(proc.pid, LIVE_GROUPS)
    result.dur_ns = int((time.monotonic() - started) * 1e9)
    result.exit_wall_ns = time.time_ns()
    return result


_libc = ctypes.CDLL(None, use_errno=True)


def _lower_priority(pid: int) -> None:
    """Set after the spawn rather than between fork and exec: that needs a `preexec_fn`, which
    disables vfork (gateway/execution/reaper.py). The plugin runs its first microseconds at the
    gateway's priority; a process it forks after this inherits the lower one.

    Why through ctypes: while the plugin's exec is under way the kernel makes `setpriority` wait
    for it, 0.3-0.6 ms on a 2-core VM, and `os.setpriority` waits holding the GIL, so every other
    thread of the daemon stopped with it (docs/performance.md). A ctypes call lets the GIL go; this
    thread waits no longer than the exec it would wait for anyway before the plugin reads."""
    # A failure (-1) is a plugin that already exited: nothing left to lower.
    _libc.setpriority(os.PRIO_PROCESS, pid, min(os.getpriority(os.PRIO_PROCESS, 0) + PLUGIN_NICENESS, 19))


class _Exchange:
    """Feeds stdin and drains stdout/stderr without deadlock, enforcing the caps and the deadline,
    and watches the plugin's exit (a pidfd polled with the pipes). `select.poll` on bare fds rather
    than `selectors`: this runs once per job, and the selector's bookkeeping (epoll_ctl per fd, a
    key lookup per event) cost more CPU than the exchange itself."""

    def __init__(
        self, proc: subprocess.Popen[bytes], request: bytes, result: RunResult, *, deadline: float, grace: float
    ):
        assert proc.stdin and proc.stdout and proc.stderr
        self.proc, self.result, self.deadline, self.grace = proc, result, deadline, grace
        self.request = memoryview(request)
        self.stdin_fd, self.out_fd, self.err_fd = proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()
        self.feeding = False  # stdin is registered for POLLOUT
        self.reading = {self.out_fd, self.err_fd}
        self.out = bytearray()
        self.err = bytearray()
        self.killed_at: float | None = None
        self.exited_at: float | None = None
        try:
            self.pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def run(self) -> None:
        proc = self.proc
        try:
            poller = select.poll()
            for fd in self.reading:
                poller.register(fd, select.POLLIN)
            if self.pidfd is not None:
                poller.register(self.pidfd, select.POLLIN)
            if self.request:
                os.set_blocking(self.stdin_fd, False)
                self._feed(poller)  # at once: a request that fits the pipe's buffer needs no wait
            else:
                self._close_stdin()
            self._loop(poller)
        finally:
            if self.exited_at is None:
                self._signal(signal.SIGKILL)  # an error above: nothing of the plugin may run on
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    pipe.close()  # type: ignore[union-attr]
                except OSError:
                    pass
            if self.pidfd is not None:
                os.close(self.pidfd)
            self.result.exit_code = proc.wait()
        self.result.stdout = bytes(self.out)
        self.result.stderr = bytes(self.err)

    def _loop(self, poller: select.poll) -> None:
        while True:
            if self.exited_at is None and self.pidfd is None and _exited(self.proc.pid):
                self._on_exit()
            if self.exited_at is not None and not self.reading:
                return
            wait = self._next_wait()
            if wait is None:
                return
            for fd, _ in poller.poll(wait * 1000):
                if fd == self.pidfd:
                    poller.unregister(fd)
                    self._on_exit()
                elif fd == self.stdin_fd and self.feeding:
                    self._feed(poller)
                elif fd in self.reading:
                    self._drain(poller, fd)

    def _on_exit(self) -> None:
        """The plugin has exited (not yet reaped, so its pid still names its group): the answer is
        whatever it wrote, and nothing it started may outlive it."""
        self.exited_at = time.monotonic()
        self._signal(signal.SIGKILL)
        self.result.warnings += sweep_adopted(self.proc.pid, LIVE_GROUPS)

    def _next_wait(self) -> float | None:
        """Seconds to wait for I/O, escalating TERM -> KILL as the deadline and grace pass."""
        now = time.monotonic()
        if self.exited_at is not None:
            if now < self.exited_at + AFTER_EXIT:
                return self.exited_at + AFTER_EXIT - now
            self.result.warnings.append(
                f"the plugin's output was still held open {AFTER_EXIT:g}s after it exited and its process group "
                "was killed (by a process that left the group?); stopped reading"
            )
            return None
        if self.killed_at is None:
            if now < self.deadline:
                return self.deadline - now if self.pidfd is not None else min(self.deadline - now, _EXIT_POLL)
            self.result.timed_out = True
            self._signal(signal.SIGTERM)
            self.killed_at = now
            return self.grace if self.pidfd is not None else _EXIT_POLL
        if now < self.killed_at + self.grace:
            return self.killed_at + self.grace - now if self.pidfd is not None else _EXIT_POLL
        self._signal(signal.SIGKILL)
        return _EXIT_POLL

    def _feed(self, poller: select.poll) -> None:
        try:
            sent = os.write(self.stdin_fd, self.request[:_READ_CHUNK])
        except BlockingIOError:
            sent = 0  # the pipe is full: wait until the plugin reads
        except OSError:
            sent = len(self.request)  # the plugin closed stdin early; its response still counts
        self.request = self.request[sent:]
        if self.request:
            if not self.feeding:
                poller.register(self.stdin_fd, select.POLLOUT)
                self.feeding = True
            return
        if self.feeding:
            poller.unregister(self.stdin_fd)
            self.feeding = False
        self._close_stdin()

    def _close_stdin(self) -> None:
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass  # the plugin closed its end first

    def _drain(self, poller: select.poll, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except OSError as exc:
            if exc.errno == errno.EAGAIN:
                return
            chunk = b""
        if not chunk:
            poller.unregister(fd)
            self.reading.discard(fd)
            return
        if fd == self.out_fd:
            room = STDOUT_CAP - len(self.out)
            self.out += chunk[:room]
            if len(chunk) > room and not self.result.stdout_overflow:
                # Past the cap the job has failed whatever follows; stop the plugin now.
                self.result.stdout_overflow = True
                self._signal(signal.SIGKILL)
        else:
            room = STDERR_CAP - len(self.err)
            self.err += chunk[: max(room, 0)]
            if len(chunk) > room:
                self.result.stderr_truncated = True

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _exited(pid: int) -> bool:
    """Whether `pid` has exited, leaving it unreaped (its pid keeps naming its group)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True
