"""The `ductile` console script: the same NOUN ACTION management commands as `manage.py`."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence

from gateway.daemon.tree import SUPERVISOR_ENV, die_with_supervisor

# Django answers `version` and `--version` itself with its own version; ours reports the gateway's.
ALIASES = {"version": "ductile_version", "--version": "ductile_version"}
# Two-word spellings of a top-level command: the Operator Handbook lists `system skills`.
ACTION_ALIASES = {("system", "skills"): "skills"}


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


def main(argv: Sequence[str] | None = None) -> int:
    # Start-up (~800 modules, Django's set-up, the config) allocates a great deal and frees little:
    # the collector's passes over it are wasted, ~30 ms of a daemon's start (docs/performance.md,
    # item 30). It is switched back on when Django's apps are ready (gateway.apps), before any
    # command runs; the imports are here, after it, for the same reason.
    gc.disable()
    if SUPERVISOR_ENV in os.environ:  # a child of `system start`: it must not outlive it
        die_with_supervisor()
    from gateway.bootstrap import choose_worker_settings, config_dir_from_argv, prepare_process, run_worker_command
    from gateway.config.errors import ConfigError

    argv = list(sys.argv if argv is None else argv)
    worker = argv[1:2] == ["runworkers"]
    if worker:
        choose_worker_settings()
    prepare_process(config_dir_from_argv(argv[1:]))
    from django.core.management import execute_from_command_line

    args = strip_config_dir(argv)
    if len(args) > 2 and (alias := ACTION_ALIASES.get((args[1], args[2]))):
        args[1:3] = [alias]
    if len(args) > 1 and args[1] in ALIASES:
        args[1] = ALIASES[args[1]]
    from django.db import DatabaseError

    from gateway.storage.database import describe_database, described

    # The gateway's own commands report these themselves (gateway.cli.base); this is for Django's
    # (`migrate`, `createsuperuser`, `shell`): a sentence naming what is wrong, not a traceback.
    try:
        if worker:
            run_worker_command(args)
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
