"""`version`."""

from __future__ import annotations

import platform
from typing import Any

import django
from django.core.management.base import CommandParser

from gateway.cli.base import DuctileCommand
from gateway.protocol import PROTOCOL_VERSION
from gateway.version import gateway_version


class Command(DuctileCommand):
    help = "Print the gateway version."

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_json(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        data = {
            "version": gateway_version(),
            "protocol": PROTOCOL_VERSION,
            "python": platform.python_version(),
            "django": django.get_version(),
        }
        self.emit(
            data,
            f"ductile {data['version']} (protocol {PROTOCOL_VERSION}, Django {data['django']}, "
            f"Python {data['python']})",
        )
