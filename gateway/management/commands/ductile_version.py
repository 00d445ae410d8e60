"""`version` (the console script answers `ductile version` and `--version` without loading this
command: gateway.cli.main)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import DuctileCommand
from gateway.version import version_report


class Command(DuctileCommand):
    help = "Print the gateway version, and the git commit when run from a checkout."

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_json(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        data, text = version_report()
        self.emit(data, text)
