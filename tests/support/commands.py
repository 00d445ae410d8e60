"""Whether a command line written for an operator (a systemd unit's ExecStart, the image's CMD, a
compose service's command, a line of docs/deployment.md) is one the `ductile` console script
takes as written: its noun and action in the CLI's noun table (gateway.cli.nouns), or one of the
daemons and Django commands it accepts by name (gateway.cli.surface.UNLISTED), and every flag and
argument one its command's own parser accepts."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path


def command_problem(argv: list[str]) -> str | None:
    """None when `argv` (the program first) is a command `ductile` runs; else what is wrong."""
    from django.core.management import get_commands, load_command_class
    from django.core.management.base import CommandError

    from gateway.cli import surface
    from gateway.cli.main import strip_config_dir
    from gateway.cli.nouns import NOUNS

    shown = " ".join(argv)
    if Path(argv[0]).name != "ductile":
        return f"{shown}: not the ductile console script"
    try:
        args = surface.translate(["ductile", *strip_config_dir(argv[1:])])
    except surface.UnknownCommand as exc:
        return f"{shown}: {exc}"
    if len(args) < 2:
        return f"{shown}: no command"
    name = args[1]
    noun = NOUNS.get(name)
    if noun is None and name not in surface.UNLISTED:
        return f"{shown}: {name!r} is neither a noun of gateway.cli.nouns nor a command it accepts by name"
    if noun is not None and noun.actions and (len(args) < 3 or args[2] not in noun.actions):
        return f"{shown}: {name} has no action {args[2:3]}; its actions: {', '.join(noun.actions)}"
    command = load_command_class(get_commands()[name], name)
    parser = command.create_parser("ductile", name)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parser.parse_args(args[2:])
    except (SystemExit, CommandError) as exc:
        return f"{shown}: {errors.getvalue().strip() or exc}"
    return None
