"""The lifeline helper (gateway/execution/lifeline_helper.py) SIGKILLs the plugin groups still
listed when its pipe closes, however the lines reached it: it reads the pipe every few tenths of a
second while lines arrive (less and less often while none do), so lines arrive in batches and one
may be cut between two reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gateway.execution.lifeline_helper as helper_module
from tests.support.waiting import wait_for

pytestmark = pytest.mark.process

HELPER = Path(helper_module.__file__)


def test_the_groups_still_listed_when_the_pipe_closes_are_killed_and_no_others() -> None:
    listed, released = (
        subprocess.Popen(["sleep", "60"], start_new_session=True),
        subprocess.Popen(["sleep", "60"], start_new_session=True),
    )
    read_end, write_end = os.pipe()
    helper = subprocess.Popen([sys.executable, "-I", "-S", str(HELPER)], stdin=read_end)
    os.close(read_end)
    try:
        os.write(write_end, b"+%d\n+%d\n-%d\n+" % (listed.pid, released.pid, released.pid))
        time.sleep(helper_module.PAUSE * 1.5)  # the helper reads the batch, holding a cut line
        os.write(write_end, b"%d\n" % listed.pid)  # the cut line's end: the same group again
        os.close(write_end)  # as when the spawning process dies
        assert helper.wait(timeout=10) == 0
        wait_for(lambda: listed.poll() is not None, timeout=5, what="the listed group to be killed")
        assert listed.returncode == -9
        assert released.poll() is None, "a group released before the pipe closed was killed too"
    finally:
        for proc in (listed, released, helper):
            proc.kill()
            proc.wait()


def voluntary_switches(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no context switch count for {pid}")


def test_an_idle_helper_wakes_less_and_less_yet_acts_at_once_when_its_spawner_dies() -> None:
    """An idle daemon keeps its helper: it must not wake it five times a second for nothing."""
    listed = subprocess.Popen(["sleep", "60"], start_new_session=True)
    read_end, write_end = os.pipe()
    helper = subprocess.Popen([sys.executable, "-I", "-S", str(HELPER)], stdin=read_end)
    os.close(read_end)
    try:
        os.write(write_end, b"+%d\n" % listed.pid)
        time.sleep(1.0)  # started, and the line read
        before = voluntary_switches(helper.pid)
        time.sleep(6.0)
        woke = voluntary_switches(helper.pid) - before
        # Backing off from PAUSE: about 4 reads in these 6 s (30 at a steady PAUSE of 0.2 s).
        assert woke <= 8, woke

        closed = time.monotonic()
        os.close(write_end)  # the spawner dies while the helper waits its longest
        wait_for(lambda: listed.poll() is not None, timeout=5, what="the listed group to be killed")
        assert time.monotonic() - closed < 1.0, "the pipe's end should wake the helper at once"
        assert helper.wait(timeout=5) == 0
    finally:
        for proc in (listed, helper):
            proc.kill()
            proc.wait()
