"""The audit console's accounts (/admin/): `admin create-user NAME --role auditor|operator`,
`admin list-users`, `admin disable-user NAME`, `admin enable-user NAME`, `admin remove-user NAME`,
and `admin unlock NAME [--from ADDRESS]` to lift a login lockout. An unknown name exits 1, as every
other "no such" of the CLI does."""

from __future__ import annotations

import getpass
import sys
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import CommandParser
from django.utils import timezone

from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit
from gateway.cli.nouns import NOUNS
from gateway.operations.accounts import (
    AccountError,
    AccountRow,
    list_accounts,
    lockouts,
    remove_account,
    save_account,
    set_active,
    unlock,
)
from ledger.roles import ROLES


class Command(DuctileCommand):
    help = NOUNS["admin"].summary

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
        listing = actions.add_parser(
            "list-users", help="every account: role, active, last login, whether a login lockout holds it"
        )
        self.add_json(listing)
        for verb, explain in (
            ("disable-user", "the account can no longer log in, and its open sessions end"),
            ("enable-user", "a disabled account may log in again"),
            ("remove-user", "delete the account (what it did stays in the ledger under its name)"),
        ):
            one = actions.add_parser(verb, help=explain)
            one.add_argument("username", metavar="NAME")
            self.add_json(one)
        lift = actions.add_parser("unlock", help="lift a login lockout (too many failed logins) before it ends")
        lift.add_argument("username", metavar="NAME")
        lift.add_argument("--from", dest="address", metavar="ADDRESS", help="only the lockout from this address")
        self.add_json(lift)

    def handle(self, *args: Any, **options: Any) -> None:
        self.open_ledger()
        action = options["action"]
        try:
            if action == "create-user":
                self.create(options)
            elif action == "list-users":
                self.list_users()
            elif action in ("disable-user", "enable-user"):
                self.set_active(options["username"], action == "enable-user")
            elif action == "remove-user":
                remove_account(options["username"])
                self.emit({"username": options["username"], "removed": True}, f"removed {options['username']}")
            else:
                self.unlock(options["username"], options["address"])
        except AccountError as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc

    def create(self, options: dict[str, Any]) -> None:
        password = self._password(options["password_stdin"])
        account = save_account(
            options["username"], options["role"], password, update=options["update"], email=options["email"]
        )
        verb = "created" if account.created else "updated"
        self.emit(
            {"username": account.username, "role": account.role, "created": account.created},
            f"{verb} {account.username} ({account.role}): log in at /admin/",
        )

    def list_users(self) -> None:
        rows = list_accounts(timezone.now())

        def line(row: AccountRow) -> str:
            state = "active" if row.active else "disabled"
            last = f"{row.last_login:%Y-%m-%d %H:%M:%S}" if row.last_login else "never"
            locked = "".join(
                f", locked out from {lockout.address} until {lockout.until:%H:%M:%S} UTC" for lockout in row.lockouts
            )
            return f"{row.username:20} {','.join(row.roles) or '-':10} {state:9} last login {last}{locked}"

        self.emit(
            {"users": [row.as_dict() for row in rows]},
            lambda: "\n".join(line(row) for row in rows) if rows else "no accounts: `ductile admin create-user`",
        )

    def set_active(self, username: str, active: bool) -> None:
        changed = set_active(username, active)
        state = "enabled" if active else "disabled"
        self.emit(
            {"username": username, "active": active, "changed": changed},
            f"{state} {username}" if changed else f"{username} was {state} already",
        )

    def unlock(self, username: str, address: str | None) -> None:
        held = [
            lockout.as_dict() for lockout in lockouts(timezone.now(), username) if address in (None, lockout.address)
        ]
        cleared = unlock(username, address)
        if not cleared and not User.objects.filter(username=username).exists():
            raise Exit(EXIT_FAILED, f"no console account and no failed logins named {username!r}")
        where = f" from {address}" if address else ""
        if held:
            text = f"unlocked {username}{where}: it may log in again"
        elif cleared:
            text = f"{username} was not locked out{where}; its failed logins count 0 again"
        else:
            text = f"{username} was not locked out{where}"
        self.emit({"username": username, "address": address, "lifted": held, "cleared_attempts": cleared}, text)

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
