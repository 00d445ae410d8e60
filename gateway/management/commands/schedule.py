"""`schedule pause PLUGIN[:ID]`, `schedule resume PLUGIN[:ID]`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from gateway.cli.base import EXIT_USAGE, DuctileCommand, Exit
from gateway.cli.nouns import NOUNS
from gateway.operations import CLI, resume_schedule
from ledger.models import ScheduleEntry
from ledger.states import ActionRefused


class Command(DuctileCommand):
    help = NOUNS["schedule"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        for name, text in (
            ("pause", "stop firing a plugin's schedules (all, or PLUGIN:ID for one); survives restarts"),
            ("resume", "fire them again, from the next run after now (missed runs are not caught up)"),
        ):
            sub = actions.add_parser(name, help=text)
            sub.add_argument("target", metavar="PLUGIN[:ID]")
            sub.add_argument("--dry-run", action="store_true", help="show which entries would change")
            self.add_json(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        runtime = self.open_ledger()
        plugin, _, schedule_id = options["target"].partition(":")
        rows = ScheduleEntry.objects.filter(plugin=plugin).order_by("schedule_id")
        if schedule_id:
            rows = rows.filter(schedule_id=schedule_id)
        if not rows.exists():
            raise Exit(
                EXIT_USAGE,
                f"no schedule entry {options['target']!r} in the database "
                "(entries appear once `runscheduler` has started with them configured)",
            )
        pausing = options["action"] == "pause"
        now = timezone.now()
        changed = []
        for row in rows:
            if pausing and row.can_pause:
                if not options["dry_run"]:
                    row.pause_by_hand(by=str(CLI), now=now)
            elif not pausing and row.can_resume:
                try:
                    resume_schedule(runtime, row, now=now, dry_run=options["dry_run"])
                except ActionRefused as exc:
                    raise Exit(EXIT_USAGE, str(exc)) from exc
            else:
                continue
            changed.append(row.address)
        verb = ("would " if options["dry_run"] else "") + ("pause" if pausing else "resume")
        self.emit(
            {"action": options["action"], "changed": changed, "dry_run": options["dry_run"]},
            f"{verb}: {', '.join(changed)}" if changed else f"nothing to {options['action']}",
        )
