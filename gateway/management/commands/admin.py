"""`admin create-user NAME --role auditor|operator`: an account for the audit console (/admin/)."""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit
from gateway.operations.accounts import AccountError, save_account
from ledger.roles import ROLES


class Command(DuctileCommand):
    help = "Audit console accounts: `admin create-user NAME --role auditor|operator`."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = actions.add_parser(
            "create-user",
            help="an account that logs in to /admin/: auditor (views everything) or operator (also acts)",
        )
        create.add_argument("username", metavar="NAME")
        create.add_argument("--role", required=True, choices=ROLES)
        create.add_argument("--email", default="")
        create.add_argument(
            "--password-stdin", action="store_true", help="read the password from the first line of stdin"
        )
        create.add_argument("--update", action="store_true", help="an existing user: set its role and password")
        self.add_json(create)

    def handle(self, *args: Any, **options: Any) -> None:
        self.open_ledger()
        password = self._password(options["password_stdin"])
        try:
            account = save_account(
                options["username"], options["role"], password, update=options["update"], email=options["email"]
            )
        except AccountError as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc
        verb = "created" if account.created else "updated"
        self.emit(
            {"username": account.username, "role": account.role, "created": account.created},
            f"{verb} {account.username} ({account.role}): log in at /admin/",
        )

    def _password(self, from_stdin: bool) -> str:
        if from_stdin:
            password = sys.stdin.readline().rstrip("\r\n")
        elif sys.stdin.isatty():
            password = getpass.getpass("Password: ")
            if getpass.getpass("Password (again): ") != password:
                raise Exit(EXIT_USAGE, "the two passwords differ")
        else:
            raise Exit(EXIT_USAGE, "no terminal to ask for the password on: pass --password-stdin")
        if not password:
            raise Exit(EXIT_USAGE, "the password is empty")
        return password
