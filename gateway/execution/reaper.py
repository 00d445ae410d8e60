"""Plugin processes never outlive their job or the process that spawned them (idiom 2: a plugin's
lifetime is one invocation; issue 12, defect 5).

Three mechanisms, each for a way a plugin's processes could survive:

* Its process group is SIGKILLed the moment the plugin exits (`gateway.execution.runner`): children it left
  behind die with it.
* The lifeline: a small helper process per spawning process, fed `+PGID` / `-PGID` lines over a
  pipe. When the spawner dies, even by SIGKILL, the kernel closes the pipe and the helper SIGKILLs
  every group still listed: the plugins and their children die with their daemon.
* Adoption (daemons only): `runworkers` becomes a child subreaper, so a process that left its
  plugin's group with `setsid` is re-parented to the daemon when the plugin exits, where it is
  found, killed and reported instead of running on under init.

Why a lifeline rather than PR_SET_PDEATHSIG: the signal must be set in the child between fork and
exec, which from Python means `preexec_fn`: it disables vfork and runs Python in a fork of an
~80 MB process, measured at ~11 ms per spawn against ~0.6-1 ms (`setpriv --pdeathsig` as a
pre-exec costs another exec, ~3 ms). It also fires when the *thread* that forked dies, not the
process, and it is not inherited by the plugin's own children. Two pipe writes per spawn cost
microseconds and cover the whole group.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from gateway.logs import logger

log = logger("runner")

_PR_SET_CHILD_SUBREAPER = 36
PIPE_BYTES = 1 << 20


class Lifeline:
    """The helper that kills this process's plugin groups when this process dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._owner = 0  # the pid that started the helper: a forked child must start its own
        self.pid: int | None = None

    def hold(self, pgid: int, live: set[int]) -> None:
        self._send(b"+%d\n" % pgid, live)

    def release(self, pgid: int, live: set[int]) -> None:
        self._send(b"-%d\n" % pgid, live)

    def _send(self, line: bytes, live: set[int]) -> None:
        with self._lock:
            try:
                if self._fd is None or self._owner != os.getpid():
                    self._start(live)
                assert self._fd is not None
                os.write(self._fd, line)  # under PIPE_BUF: atomic, and the helper drains it at once
            except OSError as exc:
                # The helper is gone (killed by hand?): start a new one at the next spawn.
                log.warning("plugin lifeline unavailable (%s); plugins may outlive this process", exc)
                self._close()

    def _start(self, live: set[int]) -> None:
        self._close()
        read_end, write_end = os.pipe()
        # Room for ~100,000 jobs' lines: the helper reads them every few seconds at most
        # (lifeline_helper.MAX_PAUSE), and a full pipe would make a spawn wait for its next read.
        # Above the host's pipe-max-size it stays at the default 64 KiB, ~5,000 jobs' lines.
        with contextlib.suppress(OSError):
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        try:
            # Own session: a signal to the daemon's process group (Ctrl-C, a supervisor's killpg)
            # must not take the helper down before it has done its work.
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(Path(__file__).with_name("lifeline_helper.py"))],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env={"PATH": os.defpath},
            )
        finally:
            os.close(read_end)
        self._fd, self._owner, self.pid = write_end, os.getpid(), proc.pid
        # Why forget the Popen: the helper outlives nothing but us; reaping it would block.
        proc.returncode = 0
        for pgid in list(live):
            os.write(write_end, b"+%d\n" % pgid)

    def _close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd, self.pid = None, None


LIFELINE = Lifeline()


# -- adoption (child subreaper) -----------------------------------------------------------------

_adopting = False


def adopt_orphans() -> bool:
    """Make this process the child subreaper of everything it spawns (Linux 3.4+). For daemons
    whose only children are plugins: anything else re-parented here would be taken for an escape."""
    global _adopting
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _adopting = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _adopting = False
    if not _adopting:
        log.warning("cannot become a child subreaper: a plugin's setsid escapes will go unnoticed")
    return _adopting


def sweep_adopted(finished_pgid: int, live: set[int]) -> list[str]:
    """After a plugin exited and its group was killed: reap the group's leftovers re-parented to
    us, and kill every adopted process that escaped its plugin's group. Returns one line per
    escape. Costs one read of a /proc file when nothing was adopted."""
    if not _adopting:
        return []
    pid = os.getpid()
    try:
        # Orphans are re-parented to the thread group leader, whose tid is our pid. Read with os
        # calls: this runs after every job, and pathlib's parsing cost more than the read.
        children = _read(f"/proc/{pid}/task/{pid}/children").split()
    except OSError:
        return []
    escapes = []
    own_group = os.getpgrp()
    for child in map(int, children):
        if child == LIFELINE.pid or child == finished_pgid or child in live:
            continue  # the helper, or a plugin itself (reaped by its runner, never here)
        try:
            stat = _read(f"/proc/{child}/stat")
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        state, _ppid, pgid = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(pgid) == own_group or (int(pgid) in live and int(pgid) != finished_pgid):
            continue  # spawned by us directly, or a descendant of a plugin still running
        if state != "Z" and int(pgid) != finished_pgid:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                continue
            escapes.append(f"process {child} ({name}) left the plugin's process group (setsid?); it was killed")
        try:
            os.waitpid(child, os.WNOHANG)  # ours to reap now; a slow death is reaped at a later sweep
        except ChildProcessError:
            pass
    return escapes


def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 16).decode(errors="replace")
    finally:
        os.close(fd)
