"""docs/deployment.md as an operator follows it: every `ductile` command in its shell blocks is one
the CLI takes as written (its noun and action in the noun table, each flag its parser's:
tests/support/commands.py), every unit and file it names ships in deploy/, and the cluster's
environment it shows is the one the units and their tests expect."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.test_deploy_files import CLUSTER_API_FLAGS, INSTALLED, SYSTEMD
from tests.support.checkout import REPO
from tests.support.commands import command_problem

DOC = REPO / "docs" / "deployment.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def shell_lines() -> list[list[str]]:
    lines = []
    for block in blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                lines.append(shlex.split(line))
    return lines


def ductile_argv(words: list[str]) -> list[str] | None:
    """The `ductile ...` command a line runs: the line itself, or the command of `docker compose
    run|exec ... SERVICE ductile ...`; None for any other line."""
    if words[:1] == ["ductile"]:
        return words
    if words[:2] == ["docker", "compose"] and words[2:3] in (["run"], ["exec"]) and "ductile" in words:
        return words[words.index("ductile") :]
    return None


def test_every_ductile_command_of_the_guide_is_one_the_cli_takes():
    commands = [argv for argv in map(ductile_argv, shell_lines()) if argv]
    problems = [problem for problem in map(command_problem, commands) if problem]
    assert not problems, "\n".join(problems)
    spelled = {" ".join(argv[1:3]) for argv in commands}
    # The walk from one box to a cluster, each step a command the suite runs.
    for step in ("config init", "system status", "system backup", "system migrate-ledger", "job logs", "migrate"):
        assert any(s == step or s.startswith(step + " ") for s in spelled), f"the guide lost `ductile {step}`"
    moves = [argv for argv in commands if argv[1:3] == ["system", "migrate-ledger"]]
    assert any("--dry-run" in argv for argv in moves) and any("--dry-run" not in argv for argv in moves)


def test_every_unit_and_file_the_guide_names_ships():
    text = DOC.read_text()
    for path in set(re.findall(r"\bdeploy/[\w./@-]+\w", text)):
        assert (REPO / path).exists(), f"docs/deployment.md names {path}, which does not exist"
    for words in shell_lines():
        if words[:1] == ["systemctl"] and words[1] in ("enable", "start", "stop", "restart"):
            for unit in (w for w in words[2:] if not w.startswith("-")):
                template = re.sub(r"@[^.]*", "@", unit.removesuffix(".service")) + ".service"
                assert (SYSTEMD / template).exists(), f"systemctl {words[1]} {unit}: no {template} in deploy/systemd"
    for words in shell_lines():
        if words[:1] == ["install"]:
            sources = [w for w in words if w.startswith("deploy/")]
            assert all((REPO / source).exists() for source in sources), words


def test_the_cluster_environment_of_the_guide_is_the_units_one():
    [environment] = [block for block in blocks("ini") if "DATABASE_URL" in block]
    values = dict(line.split("=", 1) for line in environment.splitlines() if "=" in line)
    assert values["DUCTILE_START_FLAGS"] == CLUSTER_API_FLAGS
    assert values["DATABASE_URL"].startswith("postgresql://")
    shipped = (SYSTEMD / "ductile.env").read_text()
    assert all(f"{key}=" in shipped for key in values), "ductile.env does not mention a variable the guide sets"


@pytest.mark.process
def test_the_cli_wrapper_runs_what_the_units_run_with_their_environment():
    wrapper = REPO / "deploy" / "ductile"
    text = wrapper.read_text()
    assert subprocess.run(["sh", "-n", str(wrapper)], capture_output=True).returncode == 0
    assert wrapper.stat().st_mode & 0o111, "deploy/ductile is not executable"
    [environment_file] = {v for v in re.findall(r"EnvironmentFile=(\S+)", (SYSTEMD / "ductile.service").read_text())}
    assert f". {environment_file}" in text and INSTALLED in text
    assert "runuser -u ductile --" in text
    assert Path(INSTALLED).name == "ductile"


@pytest.mark.process
def test_the_one_box_config_commands_make_a_config_that_checks(tmp_path):
    """The guide's `config init` and `config set` lines, run as written but for the directories
    (a temporary /etc/ductile and /var/lib/ductile), give a valid config with the ledger in the
    state directory the units may write."""
    etc, state = tmp_path / "etc-ductile", tmp_path / "var-lib-ductile"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DUCTILE_DB_PATH")}
    env["DUCTILE_CONFIG_DIR"] = str(etc)
    one_box = shell_lines()[: next(i for i, w in enumerate(shell_lines()) if w[:1] == ["systemctl"] and "--now" in w)]
    config_lines = [argv for argv in map(ductile_argv, one_box) if argv and argv[1] == "config"]
    assert [argv[2] for argv in config_lines] == ["init", "set"]
    for argv in config_lines:
        words = [w.replace("/etc/ductile", str(etc)).replace("/var/lib/ductile", str(state)) for w in argv]
        ran = subprocess.run(
            [str(Path(sys.executable).parent / "ductile"), *words[1:]], capture_output=True, text=True, env=env
        )
        assert ran.returncode == 0, f"{' '.join(argv)}: {ran.stderr}"
    checked = subprocess.run(
        [str(Path(sys.executable).parent / "ductile"), "config", "get", "state.path", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert checked.returncode == 0, checked.stderr
    assert str(state / "ductile.db") in checked.stdout
