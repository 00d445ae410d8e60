"""`version`."""

from __future__ import annotations

import platform
from typing import Any

import django
from django.core.management.base import CommandParser

from gateway.cli.base import DuctileCommand
from gateway.execution.protocol import PROTOCOL_VERSION
from gateway.version import gateway_version, source_commit


class Command(DuctileCommand):
    help = "Print the gateway version, and the git commit when run from a checkout."

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_json(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        source = source_commit()
        data = {
            "version": gateway_version(),
            "protocol": PROTOCOL_VERSION,
            "python": platform.python_version(),
            "django": django.get_version(),
            # From the checkout the code runs from; null for an installed package, which records no
            # commit (nor a build time: no build step stamps one, so none is reported).
            "commit": source.commit if source else None,
            "commit_date": source.committed_at if source else None,
            "dirty": source.dirty if source else None,
        }
        text = (
            f"ductile {data['version']} (protocol {PROTOCOL_VERSION}, Django {data['django']}, Python {data['python']})"
        )
        if source:
            text += f"\ncommit {source.commit[:12]}{' (with uncommitted changes)' if source.dirty else ''}, "
            text += f"committed {source.committed_at}"
        self.emit(data, text)
