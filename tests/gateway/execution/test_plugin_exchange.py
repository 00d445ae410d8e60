"""The exchange with one plugin process: a request larger than the pipe's buffer reaches a plugin
that is slow to read, all of it; a plugin that answers without reading gets its answer counted."""

from __future__ import annotations

from pathlib import Path

from gateway.execution.runner import run_plugin
from gateway.plugins.environment import plugin_environment

SLOW_READER = """#!/bin/sh
sleep 0.3
echo "{\\"status\\": \\"ok\\", \\"result\\": \\"$(wc -c | tr -d ' ')\\"}"
"""

NO_READER = """#!/bin/sh
exec 0<&-
echo '{"status": "ok", "result": "did not read"}'
"""


def plugin(tmp_path: Path, script: str) -> Path:
    entry = tmp_path / "run.sh"
    entry.write_text(script)
    entry.chmod(0o755)
    return entry


def test_a_request_larger_than_the_pipe_reaches_a_slow_reader_whole(tmp_path: Path) -> None:
    request = b'{"blob": "' + b"x" * (3 * 1024 * 1024) + b'"}\n'  # 3 MiB: many pipe buffers
    result = run_plugin(plugin(tmp_path, SLOW_READER), request, timeout=30, env=plugin_environment())
    assert result.exit_code == 0, result.stderr
    assert f'"result": "{len(request)}"' in result.stdout.decode()
    assert not result.timed_out and not result.warnings


def test_a_plugin_that_closes_stdin_unread_still_answers(tmp_path: Path) -> None:
    request = b'{"blob": "' + b"x" * (1024 * 1024) + b'"}\n'
    result = run_plugin(plugin(tmp_path, NO_READER), request, timeout=30, env=plugin_environment())
    assert result.exit_code == 0, result.stderr
    assert b"did not read" in result.stdout and not result.timed_out
