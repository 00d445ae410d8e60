"""Spawning one plugin process for one command (spec 000 §5.1, §5.6; idiom 2).

The plugin gets its own process group and a clean environment; a timeout sends SIGTERM to the
whole group, waits out the grace period, then SIGKILLs the group, so grandchildren that trap
TERM die too. stdout is capped at 10 MiB, stderr at 64 KiB.

The answer is complete when the plugin process has exited and its output has been read: its
group is SIGKILLed at that moment, so a child left behind can neither run on nor hold stdout
open until the timeout (issue 12, defects 5 and 6; `gateway.execution.reaper` for the rest).
"""

from __future__ import annotations

import errno
import os
import resource
import select
import signal
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from gateway.execution.credentials import as_user
from gateway.execution.namespaces import NetworkNamespace
from gateway.execution.reaper import LIFELINE, sweep_adopted
from gateway.plugins.sandboxing import Confinement, rlimit_pair

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
# starved by plugin processes (docs/performance-history.md, "API while workers drain"). An idle CPU
# still runs a plugin at full speed.
PLUGIN_NICENESS = 10
_READ_CHUNK = 65536

_HOST = Confinement()

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
    grace: float = KILL_GRACE,
    confinement: Confinement = _HOST,
    network: NetworkNamespace | None = None,
) -> RunResult:
    """Run the plugin once; `network` is the namespace it is spawned into (None: the gateway's)."""
    result = RunResult(enter_wall_ns=time.time_ns())
    started = time.monotonic()
    try:
        child = _spawn((*confinement.wrapper, str(entrypoint)), env, network, confinement)
    except OSError as exc:
        result.spawn_error = f"cannot start {entrypoint}: {exc.strerror or exc}"
        result.spawn_errno = exc.errno
        result.exit_wall_ns = time.time_ns()
        return result
    LIVE_GROUPS.add(child.pid)
    LIFELINE.hold(child.pid, LIVE_GROUPS)
    _lower_priority(child.pid)
    if child.unlimited is not None:
        os.killpg(child.pid, signal.SIGKILL)  # never run a plugin without the limits it was given
        result.warnings.append(f"the plugin was stopped: its limits could not be set ({child.unlimited})")
    try:
        _Exchange(child, request, result, deadline=started + timeout, grace=grace).run()
    finally:
        LIVE_GROUPS.discard(child.pid)
        LIFELINE.release(child.pid, LIVE_GROUPS)
    result.dur_ns = int((time.monotonic() - started) * 1e9)
    result.exit_wall_ns = time.time_ns()
    return result


@dataclass
class _Child:
    """A spawned plugin: its pid (also its process group's id) and this side of its three pipes."""

    pid: int
    stdin: int
    stdout: int
    stderr: int
    unlimited: str | None = None  # why its limits could not be set (it must not run on)


# What `subprocess` puts back to the default in a child (`restore_signals`): Python ignores
# SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec.
_DEFAULT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name))


def _spawn(
    argv: tuple[str, ...],
    env: Mapping[str, str],
    network: NetworkNamespace | None = None,
    confinement: Confinement = _HOST,
) -> _Child:
    """Start the plugin in a new session (so its own process group) with pipes for stdin, stdout
    and stderr, in the spawner's working directory (spec 000 §9: "Plugin subprocesses inherit the
    dispatcher's working directory").

    Why `posix_spawn` and not `subprocess.Popen`: per job, Popen's Python set-up (file objects,
    an error pipe, the argument conversions) cost about as much CPU as the rest of the spawn
    (docs/performance.md, "Throughput"). glibc's posix_spawn is a vfork and an exec that reports
    a failed exec as an error. It closes no descriptors, so this process's own must all be
    close-on-exec: Python makes every descriptor it opens so, SQLite and libpq open theirs so, and
    what the process inherited at its start is made so before its first spawn
    (`_keep_inherited_descriptors`). `argv[0]` is the entrypoint, or the sandbox's first program
    (gateway.plugins.sandboxing)."""
    _keep_inherited_descriptors()
    ends: list[int] = []
    try:
        # In this order, an end that is 0, 1 or 2 (a daemon started with one of them closed) is
        # never the source of a later dup2: the first pipe takes the lowest free descriptors.
        # dup2 onto itself clears close-on-exec (glibc 2.29+), so stdin may already be 0.
        for _ in range(3):
            ends += os.pipe()
        stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w = ends
        user = confinement.credentials
        with network.entered() if network is not None else nullcontext(), as_user(*user) if user else nullcontext():
            pid = os.posix_spawn(
                argv[0],
                list(argv),
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, stdin_r, 0),
                    (os.POSIX_SPAWN_DUP2, stdout_w, 1),
                    (os.POSIX_SPAWN_DUP2, stderr_w, 2),
                ],
                setsid=True,
                setsigdef=_DEFAULT_SIGNALS,
            )
            # Still as the plugin's user, if it has one: see gateway.execution.credentials.
            unlimited = _limit(pid, confinement.rlimits)
    except BaseException:
        for fd in ends:
            os.close(fd)
        raise
    for fd in (stdin_r, stdout_w, stderr_w):
        os.close(fd)
    return _Child(pid, stdin_w, stdout_r, stderr_r, unlimited)


_sealed_for = 0  # the pid whose inherited descriptors were made close-on-exec


def _keep_inherited_descriptors() -> None:
    """Once per process: every descriptor above stderr that this process inherited (a shell's
    `3>file`, a supervisor's socket) becomes close-on-exec, so no plugin receives it. Popen's
    `close_fds` did this in every child; here it is done once, in the spawner."""
    global _sealed_for
    if _sealed_for == os.getpid():
        return
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                os.set_inheritable(fd, False)
        except OSError:
            pass  # the listing's own descriptor, closed by now
    _sealed_for = os.getpid()


def _limit(pid: int, rlimits: tuple[tuple[int, int], ...]) -> str | None:
    """The sandbox's resource limits, set right after the spawn for the same reason as the
    priority (`_lower_priority`): a `preexec_fn` would disable vfork (+3.4 ms per spawn). The race
    this leaves: the plugin runs its first microseconds (an exec, at most the start of its
    interpreter) before its limits apply; a process it forks after this inherits them. Under
    bubblewrap the limits are set by `prlimit` before the plugin's exec instead, without a race
    (gateway.plugins.sandboxing). Why a limit could not be set, or None.

    A plugin spawned as another user (gateway.execution.credentials) may refuse the first calls:
    the kernel lets its vfork parent go on before the exec commits the child's credentials (its
    saved uid is still root meanwhile), and prlimit() matches every id. The call is tried again
    until the child has them: microseconds, or the scheduler's delay on a busy machine."""
    for which, value in rlimits:
        deadline = 0.0
        while True:
            try:
                resource.prlimit(pid, which, rlimit_pair(which, value))
                break
            except ProcessLookupError:
                return None  # the plugin has already exited: nothing left to limit
            except PermissionError as exc:
                now = time.monotonic()
                deadline = deadline or now + _LIMIT_PATIENCE
                if now > deadline:
                    return str(exc)
                # A sleep, not a spin: on a busy machine the child waits for this CPU to exec.
                time.sleep(_LIMIT_RETRY)
            except OSError as exc:
                return str(exc)
    return None


# How long a refused prlimit() is tried again while a plugin's exec commits its credentials.
_LIMIT_PATIENCE = 1.0
_LIMIT_RETRY = 0.0001


def _lower_priority(pid: int) -> None:
    """Set after the spawn: posix_spawn runs no code of ours between fork and exec (a Python
    `preexec_fn` would also disable vfork). The plugin runs its first microseconds at the
    gateway's priority; a process it forks after this inherits the lower one.

    SCHED_BATCH first, then the niceness. Why the batch policy: it is the one for work that need
    not answer at once; a batch task never preempts another when it wakes. Why first: lowering
    the niceness of a just-spawned plugin under the normal policy took this thread off its CPU
    for 0.5-0.6 ms per spawn on a 2-core VM (as if the CPU went to the plugin until it blocked;
    throughput -10 %, docs/performance-history.md item 22); once the plugin is a batch task, neither call
    waits."""
    try:
        os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, pid, min(os.getpriority(os.PRIO_PROCESS, 0) + PLUGIN_NICENESS, 19))
    except OSError:
        pass  # the plugin has already exited: nothing left to lower


class _Exchange:
    """Feeds stdin and drains stdout/stderr without deadlock, enforcing the caps and the deadline,
    and watches the plugin's exit (a pidfd polled with the pipes). `select.poll` on bare fds rather
    than `selectors`: this runs once per job, and the selector's bookkeeping (epoll_ctl per fd, a
    key lookup per event) cost more CPU than the exchange itself."""

    def __init__(self, child: _Child, request: bytes, result: RunResult, *, deadline: float, grace: float):
        self.pid, self.result, self.deadline, self.grace = child.pid, result, deadline, grace
        self.request = memoryview(request)
        self.stdin_fd: int | None = child.stdin
        self.out_fd, self.err_fd = child.stdout, child.stderr
        self.feeding = False  # stdin is registered for POLLOUT
        self.reading = {self.out_fd, self.err_fd}
        self.out = bytearray()
        self.err = bytearray()
        self.killed_at: float | None = None
        self.exited_at: float | None = None
        try:
            self.pidfd: int | None = os.pidfd_open(child.pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def run(self) -> None:
        try:
            poller = select.poll()
            for fd in self.reading:
                poller.register(fd, select.POLLIN)
            if self.pidfd is not None:
                poller.register(self.pidfd, select.POLLIN)
            if self.request and self.stdin_fd is not None:
                os.set_blocking(self.stdin_fd, False)
                self._feed(poller)  # at once: a request that fits the pipe's buffer needs no wait
            else:
                self._close_stdin()
            self._loop(poller)
        finally:
            if self.exited_at is None:
                self._signal(signal.SIGKILL)  # an error above: nothing of the plugin may run on
            self._close_stdin()
            for fd in (self.out_fd, self.err_fd):
                os.close(fd)
            if self.pidfd is not None:
                os.close(self.pidfd)
            _, status = os.waitpid(self.pid, 0)
            self.result.exit_code = os.waitstatus_to_exitcode(status)
        self.result.stdout = bytes(self.out)
        self.result.stderr = bytes(self.err)

    def _loop(self, poller: select.poll) -> None:
        while True:
            if self.exited_at is None and self.pidfd is None and _exited(self.pid):
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
        self.result.warnings += sweep_adopted(self.pid, LIVE_GROUPS)

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
        assert self.stdin_fd is not None
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
        if self.stdin_fd is not None:
            os.close(self.stdin_fd)  # the plugin sees the end of its request
            self.stdin_fd = None

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
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _exited(pid: int) -> bool:
    """Whether `pid` has exited, leaving it unreaped (its pid keeps naming its group)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True
