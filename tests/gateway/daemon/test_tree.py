"""What a start does with the processes a killed `system start` left behind (gateway/daemon/tree.py):
real processes, each leading its own group as the supervisor's children do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.daemon.tree import end_dead_tree, record_children, start_time

pytestmark = pytest.mark.process

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
POLITE = "import time; print('up', flush=True); time.sleep(60)"


def spawn(code: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert child.stdout is not None and child.stdout.readline() == "up\n"  # its handlers are set
    return child


def test_the_left_tree_is_ended_sigterm_first_then_sigkill(tmp_path: Path):
    polite, stubborn = spawn(POLITE), spawn(STUBBORN)
    record = tmp_path / "ductile.children"
    record_children(record, [polite.pid, stubborn.pid])
    said: list[str] = []
    started = time.monotonic()
    assert end_dead_tree(record, said.append, grace=1.0) == 2
    assert polite.wait(timeout=5) == -15 and stubborn.wait(timeout=5) == -9
    assert time.monotonic() - started < 5
    assert any("outlived" in line for line in said)
    assert not record.exists()


def test_a_recorded_pid_now_held_by_another_process_is_left_alone(tmp_path: Path):
    bystander = spawn(POLITE)
    try:
        record = tmp_path / "ductile.children"
        started = start_time(bystander.pid)
        assert started is not None
        entries = f'[{{"pid": {bystander.pid}, "start": {started - 1}}}]'
        record.write_text(f'{{"written_in": "{tmp_path.resolve()}", "children": {entries}}}')
        assert end_dead_tree(record, print, grace=0.5) == 0
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_start_time_reads_past_a_command_name_with_spaces_and_parentheses(tmp_path: Path):
    odd = tmp_path / "a (b) c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(5)"])
    try:
        theirs, ours = start_time(child.pid), start_time(os.getpid())
        assert theirs is not None and ours is not None and theirs >= ours
    finally:
        child.kill()
        child.wait()


def test_a_record_copied_from_another_state_directory_ends_nothing(tmp_path: Path):
    """Before: `system restore` of a backup beside a live gateway wrote its `ductile.children`
    into the new state directory, and the restored gateway's first start ended the live
    gateway's API, workers and webhook listener."""
    live = spawn(POLITE)
    try:
        (tmp_path / "live").mkdir()
        (tmp_path / "restored").mkdir()
        record_children(tmp_path / "live" / "ductile.children", [live.pid])
        copied = tmp_path / "restored" / "ductile.children"
        copied.write_bytes((tmp_path / "live" / "ductile.children").read_bytes())
        said: list[str] = []
        assert end_dead_tree(copied, said.append, grace=0.5) == 0
        assert live.poll() is None
        live_dir = tmp_path.resolve() / "live"
        assert said == [f"{copied} was written by a gateway in {live_dir}: its processes are not ours"]
        assert not copied.exists()
    finally:
        live.kill()
        live.wait()
