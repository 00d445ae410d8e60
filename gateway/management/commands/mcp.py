"""`mcp [--token TOKEN]`: the gateway's MCP server over stdin and stdout, for a local MCP client
(gateway/mcp/stdio.py; docs/mcp.md has each client's one line of configuration)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import EXIT_USAGE, DuctileCommand, Exit
from gateway.cli.nouns import NOUNS
from gateway.mcp.stdio import TOKEN_ENV, InvalidToken, local_caller, serve, token_from


class Command(DuctileCommand):
    help = NOUNS["mcp"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--token",
            help=f"an API token: the client sees and calls what its scopes allow (default: ${TOKEN_ENV}; "
            "without either, every tool, as the local CLI)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.open_ledger()
        secret = token_from(options["token"])
        try:
            local_caller(secret)
        except InvalidToken:
            raise Exit(EXIT_USAGE, f"the token given (--token or ${TOKEN_ENV}) is none of the API's tokens") from None
        serve(secret)
