"""What the `ductile` console script shows and accepts: the gateway's NOUN ACTION commands (spec 000
§11.7), not Django's own ~40 (`flush`, `dbshell`, `squashmigrations`, …), which stay reachable as
`ductile django COMMAND` and through `manage.py`. The legacy spellings of spec 000 §11.6 (`ductile
run`, `status`, `plugins`, `logs`, `queue`) are accepted as the NOUN ACTION commands they became.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from gateway.cli.nouns import NOUNS

COMMANDS_DIR = Path(__file__).resolve().parents[1] / "management"
# Django answers `version` and `--version` itself with its own version; ours reports the gateway's.
ALIASES = {"version": "ductile_version", "--version": "ductile_version"}
# Two-word spellings of a top-level command: the Operator Handbook lists `system skills`.
ACTION_ALIASES = {("system", "skills"): "skills"}
# Spec 000 §11.6's verbs, before the NOUN ACTION rule (§11.7): the command each became.
LEGACY = {
    "run": ("plugin", "run"),  # manually run a plugin once
    "status": ("system", "status"),  # queue depth, plugins, workers
    "plugins": ("plugin", "list"),  # list discovered plugins
    "logs": ("job", "logs"),  # `logs [plugin]`: the job log, of one plugin if named
    "queue": ("system", "watch", "--once"),  # pending and active jobs
}
# Accepted, not shown: the daemons `system start` runs (and an operator may run apart), and the
# Django commands the gateway's own messages tell an operator to run (`ductile migrate`).
UNLISTED = {"runworkers", "runscheduler", "qcluster", "migrate", "collectstatic", "ductile_version"}
LEGACY_USAGE = {"run": ("run PLUGIN", "plugin run PLUGIN"), "logs": ("logs [PLUGIN]", "job logs [--plugin PLUGIN]")}
HELP_FLAGS = ("help", "--help", "-h")
DJANGO = "django"


class UnknownCommand(Exception):
    """A first word that is no gateway command (exit 2)."""


def gateway_commands() -> list[str]:
    # Not at import: `--help` and `--version` load nothing of Django's (~0.25 s each when they
    # loaded it all: tests/gateway/cli/test_cli_startup.py).
    from django.core.management import find_commands

    return sorted(find_commands(str(COMMANDS_DIR)))


def translate(args: list[str]) -> list[str]:
    """`args` (program name first) as Django's dispatcher takes them. Raises UnknownCommand for a
    word the console script does not offer."""
    if len(args) < 2:
        return args
    if args[1] == DJANGO:
        # Django's own dispatcher, every command it knows; it names itself by the program name,
        # so its help says `ductile django help flush`, which works, not `ductile flush`.
        return [f"{args[0]} {DJANGO}", *args[2:]]
    if (spelled := respelled(args)) != args:
        return spelled
    if args[1] in LEGACY:
        rest = args[2:]
        if args[1] == "logs" and rest and not rest[0].startswith("-"):
            rest = ["--plugin", *rest]
        return [args[0], *LEGACY[args[1]], *rest]
    if args[1] in HELP_FLAGS and len(args) > 2:
        return translate([args[0], args[2], "--help"])  # `ductile help job`
    if args[1] in HELP_FLAGS or args[1] in gateway_commands() or args[1] in UNLISTED:
        return args
    raise UnknownCommand(
        f"unknown command {args[1]!r}"
        + (
            f": Django's own commands are `ductile {DJANGO} {args[1]}`"
            if args[1] in _django_commands()
            else "; `ductile help` lists the commands"
        )
    )


def respelled(args: list[str]) -> list[str]:
    """The gateway's other spellings of its commands (`version`, `system skills`); `manage.py`
    takes these too."""
    if len(args) > 2 and (alias := ACTION_ALIASES.get((args[1], args[2]))):
        return [args[0], alias, *args[3:]]
    if len(args) > 1 and args[1] in ALIASES:
        return [args[0], ALIASES[args[1]], *args[2:]]
    return args


def _django_commands() -> set[str]:
    # Not at import: see gateway_commands.
    import django
    from django.core.management import get_commands

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ductile_site.settings")
    django.setup()
    return set(get_commands())


def help_text(program: str) -> str:
    """The nouns, each with its actions (its command's own one-line help, from gateway.cli.nouns:
    no command is loaded), the legacy spellings, and where Django's commands went."""
    width = max(map(len, NOUNS)) + 2
    lines = [f"Usage: {program} NOUN ACTION [flags]   ({program} NOUN --help for a noun's actions and flags)", ""]
    lines.append("Nouns:")
    for name, noun in sorted(NOUNS.items()):
        lines.append(f"  {name:{width}}{noun.summary}")
    lines.append(f"  {'version':{width}}the gateway's version (also --version)")
    lines += ["", "Legacy spellings (spec 000 §11.6), accepted as:"]
    for name, target in LEGACY.items():
        usage, became = LEGACY_USAGE.get(name, (name, " ".join(target)))
        lines.append(f"  {usage:{width + 6}}{program} {became}")
    lines += [
        "",
        "Common flags: --config-dir DIR, --json (or --output json) on every read command, -v/--verbose,",
        "--dry-run on every change. Exit codes: 0 ok, 1 a failed check or job, 2 usage, 78 configuration.",
        f"Django's own commands (migrate, createsuperuser, dbshell, ...): {program} {DJANGO} COMMAND.",
    ]
    return "\n".join(lines) + "\n"


def runs_on_ledger_apps(args: Sequence[str]) -> bool:
    """Whether the command `args` names (translated, the program first) needs only the ledger's
    apps (ductile_site/settings_worker.py): `runworkers`, and the actions gateway.cli.nouns lists."""
    if args[1:2] == ["runworkers"]:
        return True
    noun = NOUNS.get(args[1]) if len(args) > 1 else None
    return noun is not None and noun.runs_on_ledger_apps(args[2] if len(args) > 2 else None)


def checks_the_ledger_first(args: Sequence[str]) -> bool:
    """Whether the command `args` names (translated) refuses a corrupted ledger before it starts
    (`DuctileCommand.open_ledger(check_integrity=True)`): the daemons and `system start`."""
    return args[1:2] in (["runworkers"], ["runscheduler"]) or args[1:3] == ["system", "start"]


# `version`'s flags the console script answers itself (gateway.cli.main); any other goes to the command.
VERSION_FLAGS = {(): False, ("--json",): True, ("--output", "json"): True, ("--output", "text"): False}


def plain_version(args: Sequence[str]) -> bool | None:
    """For `version` (already translated) with no flag but its output's: whether as JSON; else None."""
    if args[1:2] != [ALIASES["version"]]:
        return None
    return VERSION_FLAGS.get(tuple(args[2:]))


def is_help(args: Sequence[str]) -> bool:
    return len(args) < 2 or (len(args) == 2 and args[1] in HELP_FLAGS)
