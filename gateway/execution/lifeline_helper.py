"""The lifeline helper (see `gateway.execution.reaper`): run as `python -I -S lifeline_helper.py` with the
spawning process's pipe as stdin, so it imports nothing but the standard library and costs a few MB.
Lines `+PGID` and `-PGID` say which plugin groups are running; at EOF (the spawner is gone, however
it died) every group still listed is SIGKILLed."""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    # The spawner's own signals are not ours: only its death (EOF) ends this process.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    for line in sys.stdin.buffer:
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
