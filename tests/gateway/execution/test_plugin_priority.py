"""Plugins run nicer than the gateway, as batch tasks, so a busy host never starves the API or the
daemon holding the ledger's write lock (issue 16: the API waited seconds while workers drained),
and a plugin's spawn never takes the spawning thread's CPU (gateway.execution.runner._lower_priority)."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.execution.runner import PLUGIN_NICENESS, run_plugin
from gateway.plugins.environment import plugin_environment

# Reads its request first: by then the runner has set the priority, so what it reports is exact.
# Fields 19 and 41 of /proc/PID/stat: the niceness and the scheduling policy.
SCRIPT = """#!/bin/sh
read request
sh -c 'cut -d" " -f19,41 /proc/$$/stat' > "$1.child" 2>/dev/null
echo "{\\"status\\": \\"ok\\", \\"result\\": \\"$(cut -d' ' -f19,41 /proc/$$/stat)\\"}"
"""


def test_a_plugin_and_the_processes_it_starts_run_nicer_than_the_gateway_as_batch_tasks(tmp_path: Path) -> None:
    entry = tmp_path / "run.sh"
    entry.write_text(SCRIPT.replace('"$1.child"', str(tmp_path / "child")))
    entry.chmod(0o755)

    result = run_plugin(entry, b"{}\n", timeout=10, env=plugin_environment())

    expected = f"{min(os.getpriority(os.PRIO_PROCESS, 0) + PLUGIN_NICENESS, 19)} {os.SCHED_BATCH}"
    assert result.exit_code == 0, result.stderr
    assert f'"result": "{expected}"' in result.stdout.decode()
    assert (tmp_path / "child").read_text().strip() == expected
