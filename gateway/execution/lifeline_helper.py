"""The lifeline helper (see `gateway.execution.reaper`): run as `python -I -S lifeline_helper.py` with the
spawning process's pipe as stdin, so it imports nothing but the standard library and costs a few MB.
Lines `+PGID` and `-PGID` say which plugin groups are running; at EOF (the spawner is gone, however
it died) every group still listed is SIGKILLed.

It reads the pipe every `PAUSE` seconds rather than as each line arrives: two lines per job woke
it twice per job, ~50 µs of CPU per job on a 2-core machine that the plugins and the daemon
needed (docs/performance.md). The pipe holds thousands of jobs' lines meanwhile, and a dead
spawner's groups are killed at most `PAUSE` later."""

from __future__ import annotations

import os
import signal
import time

PAUSE = 0.2


def main() -> None:
    # The spawner's own signals are not ours: only its death (EOF) ends this process.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    os.set_blocking(0, False)
    groups: set[int] = set()
    partial = b""
    while True:
        try:
            chunk = os.read(0, 1 << 16)
        except BlockingIOError:
            time.sleep(PAUSE)  # nothing new: the spawner lives, with the same groups
            continue
        if not chunk:
            break
        *lines, partial = (partial + chunk).split(b"\n")
        for line in lines:
            if line[:1] == b"+":
                groups.add(int(line[1:]))
            elif line[:1] == b"-":
                groups.discard(int(line[1:]))
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    main()
