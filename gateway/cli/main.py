"""The `ductile` console script: the gateway's NOUN ACTION management commands (gateway.cli.surface);
`manage.py` runs the same commands and all of Django's own."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence

from gateway.daemon.tree import SUPERVISOR_ENV, die_with_supervisor

EXIT_USAGE = 2


def strip_config_dir(argv: Sequence[str]) -> list[str]:
    """`--config-dir` is applied before Django starts; Django's own commands never see it."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--config-dir", "--config"):
            skip = True
            continue
        if arg.startswith(("--config-dir=", "--config=")):
            continue
        out.append(arg)
    return out


def main(argv: Sequence[str] | None = None, *, whole_django: bool = False) -> int:
    """`whole_django`: `manage.py`, which offers Django's commands beside the gateway's."""
    # Start-up (~800 modules, Django's set-up, the config) allocates a great deal and frees little:
    # the collector's passes over it are wasted, ~30 ms of a daemon's start (docs/performance-history.md,
    # item 30). It is switched back on when Django's apps are ready (gateway.apps), before any
    # command runs; the imports are here, after it, for the same reason.
    gc.disable()
    if SUPERVISOR_ENV in os.environ:  # a child of `system start`: it must not outlive it
        die_with_supervisor()
    # The help and the version are answered before anything of Django or the config is imported:
    # an agent's first calls, and they cost ~0.25 s each when they loaded it all.
    from gateway.cli import surface

    argv = list(sys.argv if argv is None else argv)
    args = strip_config_dir(argv)
    if whole_django:
        args = surface.respelled(args)
    elif surface.is_help(args):
        sys.stdout.write(surface.help_text("ductile"))
        return 0 if len(args) > 1 else EXIT_USAGE
    else:
        try:
            args = surface.translate(args)
        except surface.UnknownCommand as exc:
            sys.stderr.write(f"error: {exc}\n")
            return EXIT_USAGE
    if (as_json := surface.plain_version(args)) is not None:
        import json

        from gateway.version import version_report

        data, text = version_report()
        sys.stdout.write((json.dumps(data, indent=2) if as_json else text) + "\n")
        return 0
    from gateway.bootstrap import choose_settings, config_dir_from_argv, prepare_process, run_gateway_command
    from gateway.config.errors import ConfigError

    ledger_apps = surface.runs_on_ledger_apps(args)
    choose_settings(ledger_apps)
    prepare_process(config_dir_from_argv(argv[1:]))
    from django.core.management import execute_from_command_line
    from django.db import DatabaseError

    from gateway.storage.database import begin_integrity_check, describe_database, described

    if surface.checks_the_ledger_first(args):
        begin_integrity_check()  # on a thread, beside the rest of the start

    # The gateway's own commands report these themselves (gateway.cli.base); this is for Django's
    # (`migrate`, `createsuperuser`, `shell`): a sentence naming what is wrong, not a traceback.
    try:
        if ledger_apps:
            run_gateway_command(args)
        else:
            execute_from_command_line(args)
    except ConfigError as exc:
        sys.stderr.write(f"error: configuration is invalid:\n{exc}\n")
        return 78
    except DatabaseError as exc:
        sys.stderr.write(f"error: database {describe_database()}: {described(exc)}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
