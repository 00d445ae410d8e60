"""The synchronous-caller cap holds across processes and frees a dead holder's slot."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.http.api.syncgate import Busy, sync_slot

pytestmark = pytest.mark.process

HOLD = """
import sys, time
from pathlib import Path
from gateway.http.api.syncgate import sync_slot
with sync_slot(Path(sys.argv[1]), 1):
    print("held", flush=True)
    time.sleep(60)  # holding the slot is the behaviour: the test kills this process while it waits
"""


def test_slots_are_shared_between_processes_and_released_when_the_holder_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None  # stdout=PIPE
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Busy), sync_slot(tmp_path, 1):
            pass
        with sync_slot(tmp_path, 2) as slot:  # a second slot is free
            assert slot == 1
    finally:
        holder.kill()
        holder.wait()
    with sync_slot(tmp_path, 1) as slot:  # the killed holder's lock went with it
        assert slot == 0
