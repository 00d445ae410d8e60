"""The lifeline helper (see `gateway.execution.reaper`): run as `python -I -S lifeline_helper.py` with the
spawning process's pipe as stdin, so it imports nothing but the standard library and costs a few MB.
Lines `+PGID` and `-PGID` say which plugin groups are running; at EOF (the spawner is gone, however
it died) every group still listed is SIGKILLed.

It waits for the pipe's end only (`poll` for nothing but POLLHUP), and reads what the lines say
every `PAUSE` seconds while they arrive, backing off to `MAX_PAUSE` while none do. Why: woken by
each line, two per job, it took ~50 µs of CPU per job on a 2-core machine that the plugins and the
daemon needed; woken every `PAUSE` whatever happened, it kept an idle daemon's tree waking five
times a second (docs/performance.md). A dead spawner's groups are still killed at once: its end
of the pipe closing wakes the poll. The pipe holds what arrives meanwhile (the spawner makes it
1 MiB: `gateway.execution.reaper`; at worst a full pipe makes the spawner wait for the next read).
"""

from __future__ import annotations

import os
import select
import signal

PAUSE = 0.2
MAX_PAUSE = 5.0


def main() -> None:
    # The spawner's own signals are not ours: only its death (EOF) ends this process.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    os.set_blocking(0, False)
    poller = select.poll()
    poller.register(0, 0)  # no events asked: only POLLHUP (and POLLERR), which are always reported
    groups: set[int] = set()
    partial = b""
    wait = PAUSE
    while True:
        poller.poll(wait * 1000)
        data, ended = _read_all()
        *lines, partial = (partial + data).split(b"\n")
        for line in lines:
            if line[:1] == b"+":
                groups.add(int(line[1:]))
            elif line[:1] == b"-":
                groups.discard(int(line[1:]))
        if ended:
            break
        wait = PAUSE if data else min(wait * 2, MAX_PAUSE)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def _read_all() -> tuple[bytes, bool]:
    """What the pipe holds now, and whether its writer is gone (EOF)."""
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(0, 1 << 16)
        except BlockingIOError:
            return b"".join(chunks), False
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


if __name__ == "__main__":
    main()
