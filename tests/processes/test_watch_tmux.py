"""`ductile system watch` in a real terminal (tmux): a person starts it from a shell, reads the
figures, sees them change as the ledger does, and quits with `q` or Ctrl+C, getting the shell
back as it was (the watch's screen gone, the terminal's line editing and echo restored)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.processes import cli_env, ductile, ledger, run_sql
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres

PROMPT = "ready$"  # capture-pane drops the space after it


class Terminal:
    """A tmux pane running a bare bash, on a tmux server of its own."""

    def __init__(self, env: dict[str, str], columns: int = 160):
        self.socket = f"ductile-test-{uuid.uuid4().hex[:8]}"
        self.env = {**env, "TERM": "xterm-256color"}
        self.tmux("new-session", "-d", "-x", str(columns), "-y", "50", "bash --norc --noprofile")
        self.type(f"PS1='{PROMPT} '; clear")

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "0", "-l", line)
        self.tmux("send-keys", "-t", "0", "Enter")

    def key(self, name: str) -> None:
        self.tmux("send-keys", "-t", "0", name)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "0")

    def title(self) -> str:
        """The pane's title, which a program sets with an OSC 0 or 2 escape sequence."""
        return self.tmux("display-message", "-p", "-t", "0", "#{pane_title}").strip()

    def wait_for_text(self, *texts: str, timeout: float = 30) -> str:
        """The screen once it shows every one of `texts`."""

        def showing() -> str:
            screen = self.screen()
            return screen if all(text in screen for text in texts) else ""

        return wait_for(showing, timeout, what=f"{texts!r} on the screen")

    def at_prompt(self) -> str:
        """The screen once the shell waits for a command (its prompt is the last line shown)."""

        def waiting() -> str:
            screen = self.screen()
            return screen if screen.rstrip().endswith(PROMPT) else ""

        return wait_for(waiting, 30, what="the shell's prompt")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminal(process_db, request) -> Iterator[tuple[Terminal, ConfigDir]]:
    """A shell at a prompt in a terminal 160 columns wide (or `request.param`'s), on a ledger
    where echo ran once."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the terminal tests: install tmux")
        pytest.skip("tmux is not installed (apt-get install tmux)")
    cfg = process_db
    cfg.write()
    ran = ductile(cfg, "plugin", "run", "echo")
    assert ran.returncode == 0, ran.stderr
    term = Terminal(cli_env(cfg), getattr(request, "param", 160))
    try:
        term.at_prompt()
        yield term, cfg
    finally:
        term.close()


def watch_command(cfg: ConfigDir) -> str:
    argv = [
        sys.executable,
        str(REPO / "manage.py"),
        "system",
        "watch",
        "--interval",
        "0.5",
        "--config-dir",
        str(cfg.path),
    ]
    return shlex.join(argv)


def assert_shell_is_back(term: Terminal) -> None:
    """The watch's screen is gone (the alternate screen was left) and the terminal's modes are
    what a shell expects: line editing (icanon) and echo on."""
    screen = term.at_prompt()
    assert "Queue and throughput" not in screen
    flags = "stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | sort | tr '\\n' ' '"
    term.type(f"echo status=$?; {flags}")
    term.wait_for_text("status=0", "echo icanon")


def test_the_view_shows_the_figures_follows_the_ledger_and_q_quits(terminal):
    term, cfg = terminal
    term.type(watch_command(cfg))
    screen = term.wait_for_text("Queue and throughput", "Plugin latency", "q quit")
    assert "1 succeeded" in screen and "0 queued" in screen
    assert "echo" in screen  # in the latency table and the events
    # A job enqueued elsewhere shows without touching the terminal.
    ledger(cfg, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}])
    term.wait_for_text("1 queued", timeout=15)
    term.key("q")
    assert_shell_is_back(term)


def test_ctrl_c_quits_and_restores_the_terminal(terminal):
    term, cfg = terminal
    term.type(watch_command(cfg))
    term.wait_for_text("Queue and throughput")
    term.key("C-c")
    assert_shell_is_back(term)


def test_a_plugins_words_show_redacted_and_escaped_never_acting_on_the_terminal(terminal):
    """A plugin failed with the admin token and escape sequences in its error: the view shows
    `[REDACTED]` and the escapes as text; the pane keeps its title and the view its figures."""
    term, cfg = terminal
    token = "tok-admin-5f0c9a7e31"
    cfg.plugins["leaky"] = {"config": {}, "retry": {"max_attempts": 1}}
    cfg.extra["api"] = {"auth": {"tokens": [{"name": "admin", "token": token, "scopes": ["*"]}]}}
    cfg.write()
    title = term.title()
    say = f"{token} \x1b]0;pwned\x07\x1b[2J\x1b[H"
    ran = ductile(cfg, "plugin", "run", "leaky", "--payload", json.dumps({"say": say}))
    assert ran.returncode == 1, ran.stderr
    term.type(watch_command(cfg))
    screen = term.wait_for_text("Latest failures", "[REDACTED] \\x1b]0;pwned\\x07")
    assert token not in screen
    assert "Queue and throughput" in screen and term.title() == title != "pwned"
    term.key("q")
    assert_shell_is_back(term)


@pytest.mark.parametrize("terminal", [80, 120], indirect=True)
def test_the_header_lines_and_every_heading_fit_the_terminal(terminal):
    """Issue 36: at 80 columns the header wrapped into the next line and the queue's figures
    broke inside one ("0" ending a line, "retry waiting" starting the next); at 120 the Running
    section, in a column of its own, cut its headings ("attem…") and the job ids."""
    term, cfg = terminal
    [queued] = ledger(cfg, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}])
    run_sql(
        cfg,
        "UPDATE job_queue SET status = 'running', claimed_by = 'vm:424242:0c0036ab9f1e', "
        f"started_at = CURRENT_TIMESTAMP, lease_until = CURRENT_TIMESTAMP WHERE id = '{queued}'",
    )
    term.type(watch_command(cfg))
    screen = term.wait_for_text("Running (1)", "q quit").splitlines()
    assert screen[0].startswith("Ductile ") and screen[1].startswith(("sqlite:", "postgres")), screen[:3]
    assert screen[2].startswith("╭─ Queue and throughput"), screen[:3]  # two header lines, no more
    figures = [line.strip("│ ") for line in screen[3:6]]
    assert any(re.search(r"\d+ retry waiting", line) for line in figures), figures
    assert not any(line.endswith(tuple("0123456789")) for line in figures), figures
    heading = next(i for i, line in enumerate(screen) if "Running (1)" in line) + 1
    assert screen[heading].split("│")[1].split() == ["job", "plugin.command", "attempt", "elapsed", "worker"]
    assert queued[:8] in screen[heading + 1].split("│")[1].split()
    term.key("q")
    assert_shell_is_back(term)
