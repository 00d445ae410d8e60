"""`event publish TYPE`: a root event, routed like any other (every matching pipeline fires)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import DuctileCommand
from gateway.cli.nouns import NOUNS
from gateway.intake.events import event_starts, preview, publish_event
from gateway.management.commands.pipeline import dry_run_text, payload_option, run_tree
from ledger.submitters import Submitter


class Command(DuctileCommand):
    help = NOUNS["event"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        publish = actions.add_parser("publish", help="publish a root event; every matching pipeline starts")
        publish.add_argument("type")
        publish.add_argument("--payload", help="JSON object")
        publish.add_argument("--dedupe-key")
        publish.add_argument("--dry-run", action="store_true", help="show every hop that would follow; enqueue nothing")
        publish.add_argument("--wait", action="store_true", help="block until every started tree is terminal")
        publish.add_argument("--timeout", type=float, default=300.0)
        self.add_json(publish)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["dry_run"]:
            runtime = self.runtime()
            payload = payload_option(options["payload"])
            starts = event_starts(runtime, options["type"], payload, source="cli", dedupe_key=options["dedupe_key"])
            data = {"event_type": options["type"], **preview(runtime, starts)}
            self.emit(data, lambda: dry_run_text(data, options["verbosity"] > 0))
            return
        runtime = self.open_ledger()

        def start() -> list[str]:
            ids = publish_event(
                runtime,
                options["type"],
                payload_option(options["payload"]),
                submitter=Submitter.CLI,
                dedupe_key=options["dedupe_key"],
            )
            if not ids:
                self.stderr.write(f"no pipeline or route matched {options['type']!r}; nothing enqueued")
            return ids

        run_tree(self, start, wait=options["wait"], timeout=options["timeout"])
