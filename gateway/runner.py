"""Spawning one plugin process for one command (spec 000 §5.1, §5.6; idiom 2).

The plugin gets its own process group and a clean environment; a timeout sends SIGTERM to the
whole group, waits out the grace period, then SIGKILLs the group, so grandchildren that trap
TERM die too. stdout is capped at 10 MiB (the prefix is kept), stderr at 64 KiB.
"""

from __future__ import annotations

import errno
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

STDOUT_CAP = 10 * 1024 * 1024
STDERR_CAP = 64 * 1024
KILL_GRACE = 5.0
_READ_CHUNK = 65536
_BASE_ENV = ("PATH", "HOME", "LANG", "TZ", "TMPDIR")

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


def kill_live_groups() -> None:
    for pgid in list(LIVE_GROUPS):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def plugin_environment(passthrough: Iterable[str] = (), source: Mapping[str, str] | None = None) -> dict[str, str]:
    """PATH, HOME, LANG, LC_*, TZ, TMPDIR and the operator's passthrough list; never the gateway's secrets."""
    source = os.environ if source is None else source
    wanted = set(_BASE_ENV) | set(passthrough)
    env = {k: v for k, v in source.items() if k in wanted or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    return env


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
    try:
        _Exchange(proc, request, result, deadline=started + timeout, grace=grace).run()
    finally:
        LIVE_GROUPS.discard(proc.pid)
    result.dur_ns = int((time.monotonic() - started) * 1e9)
    result.exit_wall_ns = time.time_ns()
    return result


class _Exchange:
    """Feeds stdin and drains stdout/stderr without deadlock, enforcing the caps and the deadline."""

    def __init__(
        self, proc: subprocess.Popen[bytes], request: bytes, result: RunResult, *, deadline: float, grace: float
    ):
        self.proc, self.result, self.deadline, self.grace = proc, result, deadline, grace
        self.request = memoryview(request)
        self.out = bytearray()
        self.err = bytearray()
        self.killed_at: float | None = None

    def run(self) -> None:
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        with selectors.DefaultSelector() as sel:
            if self.request:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
            sel.register(proc.stdout, selectors.EVENT_READ)
            sel.register(proc.stderr, selectors.EVENT_READ)
            while sel.get_map():
                wait = self._next_wait()
                if wait is None:
                    break
                for key, _ in sel.select(wait):
                    if key.fileobj is proc.stdin:
                        self._feed(sel)
                    else:
                        self._drain(sel, key.fileobj)  # type: ignore[arg-type]
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            try:
                pipe.close()
            except OSError:
                pass
        self._reap()
        self.result.stdout = bytes(self.out)
        self.result.stderr = bytes(self.err)

    def _next_wait(self) -> float | None:
        """Seconds to wait for I/O, escalating TERM -> KILL as the deadline and grace pass."""
        now = time.monotonic()
        if self.killed_at is None:
            if now < self.deadline:
                return self.deadline - now
            self.result.timed_out = True
            self._signal(signal.SIGTERM)
            self.killed_at = now
            return self.grace
        if now < self.killed_at + self.grace:
            return self.killed_at + self.grace - now
        self._signal(signal.SIGKILL)
        # After SIGKILL every writer is gone; a last short wait lets the pipes report EOF.
        if now > self.killed_at + self.grace + 1.0:
            return None
        return 0.1

    def _feed(self, sel: selectors.BaseSelector) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            sent = os.write(stdin.fileno(), self.request[:_READ_CHUNK])
        except (BrokenPipeError, OSError):
            sent = len(self.request)  # the plugin closed stdin early; its response still counts
        self.request = self.request[sent:]
        if not self.request:
            sel.unregister(stdin)
            stdin.close()

    def _drain(self, sel: selectors.BaseSelector, pipe: object) -> None:
        fd = pipe.fileno()  # type: ignore[attr-defined]
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except OSError as exc:
            if exc.errno == errno.EAGAIN:
                return
            chunk = b""
        if not chunk:
            sel.unregister(pipe)  # type: ignore[arg-type]
            return
        if pipe is self.proc.stdout:
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

    def _reap(self) -> None:
        remaining = max(self.deadline - time.monotonic(), 0.0) if self.killed_at is None else 0.0
        try:
            self.result.exit_code = self.proc.wait(timeout=remaining if remaining > 0 else 0.05)
            return
        except subprocess.TimeoutExpired:
            pass
        # Output closed but the process lingers past its deadline: same escalation as a hang.
        self.result.timed_out = True
        self._signal(signal.SIGTERM)
        try:
            self.result.exit_code = self.proc.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.result.exit_code = self.proc.wait()
