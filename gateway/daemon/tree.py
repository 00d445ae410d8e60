"""`system start`'s process tree dies with its supervisor (issue 33, item 24).

A SIGKILL of the supervisor (what the OOM killer sends) used to leave its gunicorn, `runworkers`
and housekeeping cluster running as orphans: the API served the old config, the old workers kept
claiming, and the next `system start` looped on "Address already in use". Two defences:

- Each child asks the kernel for SIGTERM when the supervisor dies (`PR_SET_PDEATHSIG`), as its
  first act (`die_with_supervisor`, from `gateway.cli.main` and gunicorn's master): SIGTERM drains,
  as `system start`'s own stop would. The children are spawned by the supervisor's main thread,
  whose end is what the kernel watches.
- The supervisor records each child it starts (PID and start time: a PID alone may be reused) in
  `ductile.children` beside its PID lock. A start that finds the PID lock's process gone and that
  record left behind ends what is still running of it (`end_dead_tree`): SIGTERM to each child's
  process group (each child leads its own), then SIGKILL to what outlives the grace. Only a
  process whose start time matches the record is signalled.

No Django here: gunicorn's master imports it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

# Set by the supervisor in its children's environment: the PID whose death ends them.
SUPERVISOR_ENV = "DUCTILE_SUPERVISOR_PID"
CHILDREN_FILE = "ductile.children"
_PR_SET_PDEATHSIG = 1
# How long the children of a dead supervisor get to drain before SIGKILL.
GRACE_SECONDS = 10.0


def die_with_supervisor() -> None:
    """In a child of `system start`: SIGTERM when the supervisor dies; at once if it already has
    (between its fork and this call)."""
    supervisor = os.environ.get(SUPERVISOR_ENV, "")
    if not supervisor.isdigit():
        return
    import ctypes  # here: every CLI call imports this module, few are a supervisor's children

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return  # not Linux: the next start's `end_dead_tree` remains
    if os.getppid() != int(supervisor):
        os.kill(os.getpid(), signal.SIGTERM)


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None when
    there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its closing one.
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def record_children(path: Path, pids: Iterable[int]) -> None:
    """The supervisor's live children, for a later start to end should the supervisor die."""
    entries = [{"pid": pid, "start": start} for pid in pids if (start := start_time(pid)) is not None]
    # The record names the directory it was written in: a copy elsewhere (a restored backup, a
    # state directory copied for a test) describes another gateway's processes, never its own.
    record = {"written_in": str(path.parent.resolve()), "children": entries}
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    os.replace(temporary, path)


def end_dead_tree(path: Path, say: Callable[[str], None], grace: float = GRACE_SECONDS) -> int:
    """End what is left of a dead supervisor's tree recorded in `path` (the caller has checked
    that the supervisor is gone); the number of process groups signalled. The record goes."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    written_in = record.get("written_in") if isinstance(record, dict) else None
    if written_in != str(path.parent.resolve()):
        say(f"{path} was written by a gateway in {written_in or 'another directory'}: its processes are not ours")
        path.unlink(missing_ok=True)
        return 0
    entries = record.get("children") or []
    alive = [e["pid"] for e in entries if isinstance(e, dict) and start_time(int(e["pid"])) == e.get("start")]
    for pid in alive:
        say(f"ending process group {pid}, left running by a gateway that was killed")
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_group_alive(pid) for pid in alive):
        time.sleep(0.1)
    for pid in alive:
        if _group_alive(pid):
            say(f"process group {pid} outlived {grace:.0f}s of SIGTERM: killing it")
            _signal_group(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    return len(alive)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. Not `killpg(pgid, 0)`: that succeeds on a
    zombie, and the children of a dead supervisor are reaped by whoever adopted them, or not."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False
