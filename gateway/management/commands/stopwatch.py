"""`stopwatch prune --older-than DUR [--plugin P] [--step S] [--status ST]`: delete old
`job_stopwatch` rows (each takes its sub-spans with it), as the original's command. Housekeeping
already drops rows older than `job_log_retention`; this is for an operator who wants less."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from gateway.cli.base import DuctileCommand
from gateway.cli.nouns import NOUNS
from gateway.config.durations import parse_duration
from gateway.reports import ts
from ledger.models.telemetry import JobStopwatch, StopwatchStatus

DEFAULT_LIMIT = 5000


def _age(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return seconds


def _limit(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be greater than zero")
    return value


class Command(DuctileCommand):
    help = NOUNS["stopwatch"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        prune = actions.add_parser(
            "prune", help="delete job_stopwatch rows older than --older-than (with their sub-spans)"
        )
        prune.add_argument("--older-than", type=_age, required=True, metavar="DUR", help="e.g. 24h, 14d, 2w")
        prune.add_argument("--plugin", help="only this plugin's rows")
        prune.add_argument("--step", help="only rows of this pipeline step (step_name)")
        prune.add_argument("--status", choices=StopwatchStatus.values, help="only rows with this status")
        prune.add_argument(
            "--limit", type=_limit, default=DEFAULT_LIMIT, help=f"rows deleted at most (default {DEFAULT_LIMIT})"
        )
        prune.add_argument("--dry-run", action="store_true", help="count the rows; delete nothing")
        self.add_json(prune)

    def handle(self, *args: Any, **options: Any) -> None:
        self.open_ledger()
        cutoff = timezone.now() - timedelta(seconds=options["older_than"])
        rows = JobStopwatch.objects.expired(cutoff)
        filters = {"plugin": options["plugin"], "step": options["step"], "status": options["status"]}
        for column, value in (
            ("plugin", filters["plugin"]),
            ("step_name", filters["step"]),
            ("status", filters["status"]),
        ):
            if value:
                rows = rows.filter(**{column: value})
        dry_run = options["dry_run"]
        affected = rows.count() if dry_run else rows.prune_batch(options["limit"])
        data = {
            "action": "prune",
            "dry_run": dry_run,
            "affected": affected,
            "older_than": ts(cutoff),
            "filters": filters,
        }
        chosen = ", ".join(f"{k}={v}" for k, v in filters.items() if v)
        verb = "would delete" if dry_run else "deleted"
        self.emit(
            data, f"{verb} {affected} job_stopwatch row(s) older than {ts(cutoff)}" + (f" ({chosen})" if chosen else "")
        )
