"""What every NOUN ACTION command shares: `--config-dir`, `--json`, `-v/--verbose`, exit codes, and
what reaches the terminal: everything a command writes has its control characters escaped
(gateway.terminal), and what it emits is scrubbed of the config's secrets (gateway.config.redaction),
since job errors, stderr, results and events are a plugin's or an agent's words.

Exit codes: 0 ok, 1 a failed check or job, 2 usage, 78 configuration (EX_CONFIG).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandParser, OutputWrapper
from django.db import DatabaseError

from gateway.config.errors import ConfigError
from gateway.intake import Refused
from gateway.runtime import NO_SECRETS, RUNTIME, Runtime
from gateway.storage.database import (
    DatabaseCorrupt,
    SchemaBehind,
    describe_database,
    described,
    ensure_schema,
    verify_integrity,
)
from gateway.terminal import escape_controls

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CONFIG = 0, 1, 2, 78


class Exit(Exception):
    def __init__(self, code: int, message: str = "", data: dict[str, Any] | None = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def json_object(raw: str | None, source: str) -> dict[str, Any] | None:
    """A `--payload`-style argument: None when absent, else a JSON object (exit 2 otherwise)."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise Exit(EXIT_USAGE, f"{source} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise Exit(EXIT_USAGE, f"{source} must be a JSON object")
    return value


class TerminalOutput(OutputWrapper):
    """A command's stdout or stderr: control characters escaped in all it writes (an escape
    sequence in a plugin's stderr shows as `\\x1b[2J`, not as a cleared screen). Django's own
    colours are added after, by `style_func`; `--json` output has none to escape."""

    def write(  # type: ignore[override]  # as OutputWrapper.write, which TextIOBase.write is not
        self, msg: str = "", style_func: Callable[[str], str] | None = None, ending: str | None = None
    ) -> None:
        super().write(escape_controls(msg), style_func, ending)


class DuctileCommand(BaseCommand):
    requires_system_checks: list[str] = []  # type: ignore[assignment]
    requires_migrations_checks = False
    # Daemons log JSON lines to stdout (spec §11.4); one-shot commands keep stdout for their answer.
    logs_to_stdout = False

    def add_base_argument(self, parser: CommandParser, *args: Any, **kwargs: Any) -> None:
        # The spec's `-v/--verbose` replaces Django's `-v/--verbosity {0..3}`.
        if "--verbosity" in args:
            parser.add_argument(
                "-v",
                "--verbose",
                dest="verbosity",
                action="count",
                default=0,
                help="explain: show internal logic, path resolution, decisions",
            )
            return
        super().add_base_argument(parser, *args, **kwargs)

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.add_argument(
            "--config-dir",
            "--config",
            metavar="DIR",
            help="config directory (default: $DUCTILE_CONFIG_DIR, else ~/.config/ductile)",
        )
        return parser

    def add_json(self, parser: CommandParser) -> None:
        """`--json` (and `--output json`, spec 000's spelling of it), and `-v` again so it may follow
        the action (`pipeline dry-run X -v`)."""
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument(
            "--output", choices=("json", "text"), default="text", help="json: the same as --json (default text)"
        )
        if "-v" in parser._option_string_actions:
            return  # a command without actions: the base parser has it already
        # SUPPRESS: an action's own default must not reset a `-v` given before the action.
        parser.add_argument(
            "-v", "--verbose", dest="verbosity", action="count", default=argparse.SUPPRESS, help="explain"
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("stdout", "stderr"):
            plain = getattr(self, name)
            escaped = TerminalOutput(plain._out)
            escaped.style_func = plain.style_func  # stderr's red, on a terminal
            setattr(self, name, escaped)

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.as_json = bool(options.get("json")) or options.get("output") == "json"
        # Streams given to `call_command` would be wrapped by Django in plain OutputWrappers.
        for name in ("stdout", "stderr"):
            if options.get(name):
                setattr(self, name, TerminalOutput(options.pop(name)))
        if not self.logs_to_stdout:
            for handler in logging.getLogger("ductile").handlers:
                if isinstance(handler, logging.StreamHandler):
                    handler.setStream(sys.stderr)
        try:
            return super().execute(*args, **options)
        except Exit as exc:
            self._fail(exc.code, exc.message, exc.data)
        except ConfigError as exc:
            self._fail(
                EXIT_CONFIG, f"configuration is invalid:\n{exc}", {"problems": [p.as_dict() for p in exc.problems]}
            )
        except SchemaBehind as exc:
            self._fail(EXIT_CONFIG, str(exc), None)
        except Refused as exc:
            # The intake's words, as the API gives them: a target that cannot run, input that
            # cannot be stored (gateway.intake).
            self._fail(EXIT_USAGE, str(exc), None)
        except DatabaseCorrupt as exc:
            self._fail(EXIT_FAILED, str(exc), None)
        except DatabaseError as exc:
            self._fail(EXIT_FAILED, f"database {describe_database()}: {described(exc)}", None)
        return None

    def _fail(self, code: int, message: str, data: dict[str, Any] | None) -> None:
        scrubber = RUNTIME.scrubber()
        message, data = scrubber.text(message), scrubber.json(data)
        if self.as_json:
            body = {"error": message, "exit_code": code, **(data or {})}
            self.stdout.write(json.dumps(body, indent=2, default=str))
        elif message:
            self.stderr.write(f"error: {message}")
        sys.exit(code)

    # -- helpers -------------------------------------------------------------------------------

    def runtime(self) -> Runtime:
        return RUNTIME.get()

    def gateway_runtime(self) -> Runtime:
        """For a call to the gateway's API (its address, its `*` token): the runtime the running
        gateway serves, else the config as read here (gateway.daemon.control.served_runtime)."""
        from gateway.daemon.control import served_runtime  # only the commands that call the API

        return served_runtime(self.runtime())

    def open_ledger(self, *, check_integrity: bool = False) -> Runtime:
        """The runtime, with the database's schema current. `check_integrity`: refuse a corrupted
        SQLite file first (the daemons and `system start`, before they run anything on it)."""
        runtime = self.runtime()
        if check_integrity:
            verify_integrity()
        ensure_schema()
        return runtime

    def emit(self, data: Any, text: Callable[[], str] | str, *, reveal: bool = False) -> None:
        """`data` as JSON with `--json`, else `text`, with the config's secrets scrubbed from either;
        `reveal` only for a secret the command was asked to make (a new token, shown once)."""
        scrubber = NO_SECRETS if reveal else RUNTIME.scrubber()
        if self.as_json:
            self.stdout.write(json.dumps(scrubber.json(data), indent=2, default=str))
        else:
            self.stdout.write(scrubber.text(text() if callable(text) else text))
