"""What a plugin process starts with: its own session, the three pipes and nothing else of the
spawner's descriptors, default signal dispositions, the spawner's working directory, and a clear
error when it cannot start (gateway.execution.runner._spawn)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.execution.runner import run_plugin
from gateway.plugins.environment import plugin_environment

REPO = Path(__file__).resolve().parents[3]


def plugin(tmp_path: Path, body: str) -> Path:
    entry = tmp_path / "run.sh"
    entry.write_text("#!/bin/sh\ncat >/dev/null\n" + body)
    entry.chmod(0o755)
    return entry


@pytest.mark.process
def test_a_descriptor_the_spawner_inherited_never_reaches_a_plugin(tmp_path: Path) -> None:
    # A shell's `3>file` or a supervisor's socket: open in the daemon from its start, inheritable.
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    entry = plugin(
        tmp_path,
        f"if [ -e /proc/self/fd/{write_end} ]; then echo leaked; else echo clean; fi\n"
        'ls /proc/self/fd | tr "\\n" " "\n',
    )
    spawner = textwrap.dedent(
        f"""
        from pathlib import Path
        from gateway.execution.runner import run_plugin
        result = run_plugin(Path({str(entry)!r}), b"{{}}", timeout=10, env={{"PATH": "/usr/bin:/bin"}})
        print(result.stdout.decode())
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", spawner],
            pass_fds=(write_end,),
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("clean"), done.stdout


def test_a_plugin_runs_in_its_own_session_with_default_signals_in_the_spawner_s_directory(tmp_path: Path) -> None:
    # `yes | head -1`: with SIGPIPE left ignored (Python ignores it), `yes` would complain of a
    # broken pipe on stderr instead of dying of the signal as it does from a shell.
    entry = plugin(
        tmp_path,
        "yes | head -1 >/dev/null\n"
        'echo "{\\"sid\\": $(cut -d" " -f6 /proc/$$/stat), \\"pid\\": $$, \\"cwd\\": \\"$(pwd)\\"}"\n',
    )
    result = run_plugin(entry, b"{}", timeout=10, env=plugin_environment())
    assert result.exit_code == 0, result.stderr
    assert result.stderr == b""
    seen = json.loads(result.stdout)
    assert seen["sid"] == seen["pid"]  # a session (and so a process group) of its own
    assert seen["cwd"] == os.getcwd()


def test_a_plugin_that_cannot_start_says_why(tmp_path: Path) -> None:
    missing = run_plugin(tmp_path / "nowhere.sh", b"{}", timeout=10, env=plugin_environment())
    assert missing.spawn_error == f"cannot start {tmp_path / 'nowhere.sh'}: No such file or directory"
    not_executable = tmp_path / "plain.sh"
    not_executable.write_text("#!/bin/sh\necho hi\n")
    denied = run_plugin(not_executable, b"{}", timeout=10, env=plugin_environment())
    assert denied.spawn_error == f"cannot start {not_executable}: Permission denied"
    assert denied.exit_code is None


@pytest.mark.process
@pytest.mark.parametrize("closed", [(0,), (0, 1), (0, 1, 2)])
def test_a_spawner_started_with_standard_descriptors_closed_still_feeds_and_reads_its_plugin(
    tmp_path: Path, closed: tuple[int, ...]
) -> None:
    # A daemon's standard descriptors may be closed; the pipes then get 0, 1 or 2, which the spawn's
    # own dup2s must not overwrite before they are copied (gateway.execution.runner._spawn).
    entry = tmp_path / "echo.sh"
    entry.write_text('#!/bin/sh\nread line\necho "got $line"\n')
    entry.chmod(0o755)
    report = tmp_path / "report"
    spawner = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        for fd in {closed!r}:
            os.close(fd)
        from gateway.execution.runner import run_plugin
        result = run_plugin(Path({str(entry)!r}), b"hello\\n", timeout=10, env={{"PATH": "/usr/bin:/bin"}})
        Path({str(report)!r}).write_text(repr((result.exit_code, result.stdout, result.spawn_error)))
        """
    )
    done = subprocess.run([sys.executable, "-c", spawner], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert report.read_text() == "(0, b'got hello\\n', None)", done.stderr
