"""`runscheduler`: fires schedule entries through the queue. Only parses flags; Scheduler does the rest."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import DuctileCommand
from gateway.daemon.presence import Presence
from gateway.daemon.scheduler import Scheduler
from gateway.runtime import RUNTIME


class Command(DuctileCommand):
    help = "Run the scheduler: enqueue due schedule entries (SIGTERM stops, SIGHUP reloads)."
    logs_to_stdout = True

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="sync and run one tick, then exit")

    def handle(self, *args: Any, **options: Any) -> None:
        runtime = self.open_ledger(check_integrity=True)
        for warning in runtime.config.warnings:
            self.stderr.write(f"warning: {warning}")
        # A node of its own, listed with its role; not a one-tick `--once`.
        presence = None if options["once"] else Presence({"scheduler"}, runtime.config.service.lease_ttl)
        Scheduler(RUNTIME, once=options["once"], presence=presence).run()
