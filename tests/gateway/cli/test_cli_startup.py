"""What a CLI call loads before it answers (issue 36: agents call `ductile` hundreds of times an
hour). `--help` and `--version` load neither Django nor the config; the read commands start on the
ledger's apps alone (ductile_site/settings_worker.py), without the admin, DRF, django-q2, the URL
resolver, or what another action of their noun uses. The timings: tests/bench/bench_cli.py."""

from __future__ import annotations

import argparse
import json
import subprocess

import pytest
from django.core.management import load_command_class

from gateway.cli import surface
from gateway.cli.nouns import NOUNS
from gateway.version import gateway_version
from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.processes import cli_env, ductile, ductile_json, imported_modules

# Loaded only by commands that use them, never by a read: the web and housekeeping apps (and
# croniter, which django-q2 loads), the URL resolver and Django's default log handlers (the mail
# and debug-page modules), the live view's rich, backups' tarfile, a second load of jsonschema.
NOT_FOR_A_READ = {
    *("django.contrib.admin", "rest_framework", "drf_spectacular", "django_q", "croniter", "axes"),
    *("django.urls", "django.core.mail", "django.views.debug", "rich", "tarfile", "jsonschema"),
    *("gateway.execution.dispatch", "gateway.daemon.supervisor", "gateway.operations.housekeeping"),
}


def console_script(cfg: ConfigDir, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The `ductile` console script itself, as an agent runs it."""
    return subprocess.run(
        [str(REPO / ".venv/bin/ductile"), *args, "--config-dir", str(cfg.path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(cfg, **env),
        cwd=REPO,
    )


@pytest.fixture
def cfg(config_dir: ConfigDir) -> ConfigDir:
    config_dir.write()
    return config_dir


def test_the_noun_table_is_what_the_commands_parse() -> None:
    """`ductile --help` reads gateway.cli.nouns instead of loading every command: each noun there
    is a command, each command's actions are its parser's, and its `help` is the table's."""
    listed = {name for name in surface.gateway_commands() if name not in surface.UNLISTED}
    assert set(NOUNS) == listed
    for name, noun in NOUNS.items():
        command = load_command_class("gateway", name)
        parser = command.create_parser("ductile", name)
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert tuple(subparsers[0].choices if subparsers else ()) == noun.actions, name
        assert command.help == noun.summary
        assert set(noun.ledger_only) <= {*noun.actions, "*"}, name


@pytest.mark.process
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["version", "--json"]])
def test_help_and_version_load_neither_django_nor_the_config(cfg: ConfigDir, args: list[str]) -> None:
    proc = console_script(cfg, *args, PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = imported_modules(proc.stderr)
    assert not {"django.conf", "django.db", "django.core.management", "gateway.runtime", "yaml"} & imported
    if args == ["--help"]:
        assert "Nouns:" in proc.stdout
        assert ["job", NOUNS["job"].summary] in [line.split(None, 1) for line in proc.stdout.splitlines()]
    elif args == ["--version"]:
        assert proc.stdout.startswith(f"ductile {gateway_version()} (protocol 2, Django ")
    else:
        assert json.loads(proc.stdout)["version"] == gateway_version()


@pytest.mark.process
def test_version_says_the_same_when_the_command_answers_it(cfg: ConfigDir) -> None:
    """`version -v` goes to the command itself: both ways print the same (but the commit's state,
    which a test run can change)."""
    quick = console_script(cfg, "version", "--json")
    full = console_script(cfg, "version", "--json", "-v")
    assert quick.returncode == full.returncode == 0, full.stderr
    assert json.loads(quick.stdout) == json.loads(full.stdout)


@pytest.mark.process
def test_read_commands_start_on_the_ledgers_apps_alone(cfg: ConfigDir) -> None:
    code, queued = ductile_json(cfg, "plugin", "run", "echo")
    assert code == 0, queued
    job_id = queued["job_id"]
    for args in (["job", "logs"], ["job", "inspect", job_id], ["plugin", "list"], ["system", "status"]):
        proc = ductile(cfg, *args, "--json", PYTHONPROFILEIMPORTTIME="1")
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        json.loads(proc.stdout)
        imported = imported_modules(proc.stderr)
        assert "ledger.models.jobs" in imported
        assert not NOT_FOR_A_READ & imported, (args, NOT_FOR_A_READ & imported)
    # Under its own name too: the console script is what agents run.
    proc = console_script(cfg, "job", "inspect", job_id, PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode == 0 and job_id in proc.stdout
    assert not NOT_FOR_A_READ & imported_modules(proc.stderr)
