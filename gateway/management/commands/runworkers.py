"""`runworkers`: the daemon that claims and runs jobs. Only parses flags; WorkerDaemon does the rest."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import EXIT_USAGE, DuctileCommand, Exit
from gateway.execution.reaper import adopt_orphans
from gateway.execution.workers import WorkerDaemon
from gateway.logs import lean_records
from gateway.runtime import RUNTIME
from ledger.writes.group_commit import hand_the_gil_back_sooner


class Command(DuctileCommand):
    help = "Run the worker pool: claim queued jobs and run their plugins (SIGTERM drains, SIGHUP reloads)."
    logs_to_stdout = True

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--threads", type=int, help="worker threads (default: service.max_workers)")
        serves = parser.add_mutually_exclusive_group()
        serves.add_argument("--plugins", help="comma-separated plugin names: run only these (an unnamed worker group)")
        serves.add_argument(
            "--group",
            metavar="NAME",
            help="run only the plugins of this group of service.worker_groups (re-read at each reload)",
        )
        parser.add_argument("--once", action="store_true", help="run what is runnable now, then exit")
        parser.add_argument("--max-jobs", type=int, help="exit after claiming this many jobs")
        parser.add_argument(
            "--interval",
            type=float,
            default=0.5,
            help=(
                "bounded re-check of the database when idle, in seconds (default 0.5); while nothing "
                "is queued it doubles after each look, up to 5 s (an enqueue wakes the workers at once)"
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        runtime = self.open_ledger(check_integrity=True)
        for warning in (*runtime.config.warnings, *runtime.registry.warnings):
            self.stderr.write(f"warning: {warning}")
        if options["threads"] is not None and options["threads"] < 1:
            raise Exit(EXIT_USAGE, "--threads must be at least 1")
        plugins = [p for p in (options["plugins"] or "").split(",") if p] or None
        if options["group"] is not None:
            try:
                plugins = list(runtime.config.service.worker_group(options["group"]))
            except ValueError as exc:
                raise Exit(EXIT_USAGE, f"--group: {exc}") from exc
        adopt_orphans()  # a plugin's setsid escapes come back to us, to be killed and reported
        lean_records()  # this process's log lines are JSON lines only
        hand_the_gil_back_sooner()  # its threads write and spawn: ledger.writes
        daemon = WorkerDaemon(
            RUNTIME,
            threads=options["threads"],
            plugins=plugins,
            group=options["group"],
            once=options["once"],
            max_jobs=options["max_jobs"],
            recheck=options["interval"],
        )
        daemon.run()
