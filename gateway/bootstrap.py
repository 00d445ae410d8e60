"""Process start-up, before Django: find the config directory, load it once, and tell the
settings where the database is (the config's `state.path`, unless DATABASE_URL is set)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from django.db import connections

from gateway.config.loader import resolve_config_dir
from gateway.runtime import RUNTIME


def config_dir_from_argv(argv: Sequence[str]) -> str | None:
    for index, arg in enumerate(argv):
        if arg in ("--config-dir", "--config") and index + 1 < len(argv):
            return argv[index + 1]
        for flag in ("--config-dir=", "--config="):
            if arg.startswith(flag):
                return arg[len(flag) :]
    return None


def leave_postgres_driver_unloaded() -> None:
    """In a web process on the embedded SQLite ledger: DRF imports `django.contrib.postgres`
    whenever psycopg can be imported (rest_framework/compat.py), and that loads the driver and
    libpq, 10 MB in each API worker that never opens a PostgreSQL connection (docs/performance.md,
    "Idle"). Marked absent, the import fails as it would without psycopg installed."""
    if not os.environ.get("DATABASE_URL"):
        sys.modules.setdefault("psycopg", None)  # type: ignore[arg-type]


# Set by restart_with_every_app: the process started again must not choose the worker's settings.
EVERY_APP = "DUCTILE_EVERY_APP"
DEFAULT_SETTINGS = "ductile_site.settings"
# TZ as this process was started with, before Django's settings replace it (restart_with_every_app).
_STARTING_TZ = os.environ.get("TZ")
WORKER_SETTINGS = "ductile_site.settings_worker"


def choose_settings(ledger_apps: bool) -> None:
    """`runworkers`, and the console script's commands that need only the ledger's apps
    (`ledger_apps`: gateway.cli.surface.runs_on_ledger_apps), start on the worker's settings
    (ductile_site/settings_worker.py) unless the operator chose a settings module of their own,
    or this is their start again on every app."""
    chosen = os.environ.get("DJANGO_SETTINGS_MODULE", DEFAULT_SETTINGS)
    if ledger_apps and os.environ.get(EVERY_APP) != "1" and chosen == DEFAULT_SETTINGS:
        os.environ["DJANGO_SETTINGS_MODULE"] = WORKER_SETTINGS


def run_gateway_command(argv: list[str]) -> None:
    """A gateway command on the ledger's apps (`runworkers`, the CLI's reads: gateway.cli.surface.runs_on_ledger_apps)
    as Django's `execute_from_command_line` runs it, without the two parts of `django.setup()`
    only a web process uses: the URL resolver's script prefix (importing django.urls) and
    Django's default logging, whose handlers print to the console under DEBUG and mail the admins
    a request's error (their import loads django.core.mail, the debug views and the template
    engine's filters). About 15 ms of the worker's ~0.2 s start, which the throughput benchmark
    counts (docs/performance-history.md, item 46), and of every such CLI call. Every line the command writes goes
    through settings.LOGGING, applied here as Django applies it. `--settings` and `--pythonpath`
    are honoured before the settings are read, as Django's own start does."""
    # Not at import: ~20 ms (django.core.management, django.apps) that the web processes and
    # gunicorn's start check, which import this module for prepare_process, never use.
    from django.apps import apps
    from django.conf import settings
    from django.core.management import load_command_class
    from django.core.management.base import CommandParser, handle_default_options
    from django.utils.module_loading import import_string

    early = CommandParser(add_help=False, allow_abbrev=False)
    early.add_argument("--settings")
    early.add_argument("--pythonpath")
    handle_default_options(early.parse_known_args(argv[2:])[0])
    if settings.LOGGING_CONFIG and settings.LOGGING:
        import_string(settings.LOGGING_CONFIG)(settings.LOGGING)
    apps.populate(settings.INSTALLED_APPS)
    load_command_class("gateway", argv[1]).run_from_argv(argv)


def restart_with_every_app() -> NoReturn:
    """Run this command again from the start, on the gateway's full settings: the same
    interpreter, options and arguments (`sys.orig_argv`), this process's PID. Only before the
    command has started anything (threads, children, sockets)."""
    restart({"DJANGO_SETTINGS_MODULE": DEFAULT_SETTINGS, EVERY_APP: "1"})


def restart(environ: Mapping[str, str]) -> NoReturn:
    """Run this command again from the start with `environ` added to its environment (what its
    settings are made of: `restart_with_every_app`, or the two databases of `system
    migrate-ledger`). The same interpreter, options and arguments (`sys.orig_argv`), this process's
    PID; only before the command has started anything (threads, children, sockets)."""
    connections.close_all()
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ.update(environ)
    # Django's settings set TZ to TIME_ZONE in this process's environment: the start again reads
    # the host's zone (schedules' default, gateway.config.schedules.host_timezone) from the TZ
    # this process was given.
    if _STARTING_TZ is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = _STARTING_TZ
    os.execv(sys.executable, sys.orig_argv)


def prepare_process(config_dir: str | None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", DEFAULT_SETTINGS)
    directory = resolve_config_dir(config_dir, os.environ)
    os.environ["DUCTILE_CONFIG_DIR"] = str(directory)
    RUNTIME.load(directory)
    if os.environ.get("DATABASE_URL"):
        return
    if RUNTIME.error is None:
        os.environ["DUCTILE_DB_PATH"] = str(RUNTIME.get().config.state_path)
    else:
        # A process that cannot load its config opens no database at all (not one it guessed, nor
        # the one a parent process passed down): the SQLite backend reports the config's problems.
        os.environ.pop("DUCTILE_DB_PATH", None)
