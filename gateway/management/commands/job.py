"""`job inspect ID` and `job logs`."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser
from django.db.models import Q
from django.utils.dateparse import parse_datetime

from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit
from gateway.reports import job_detail, log_entry, normalise_status
from ledger.models import Job, JobLog

MAX_LOG_LIMIT = 200


def rfc3339(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    parsed = parse_datetime(value.replace("Z", "+00:00")) if value else None
    if parsed is None or parsed.tzinfo is None:
        raise Exit(EXIT_USAGE, f"{flag} must be an RFC 3339 timestamp such as 2026-11-21T10:00:00Z, got {value!r}")
    return parsed


class Command(DuctileCommand):
    help = "Jobs: `job inspect ID`, `job logs`."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        inspect = actions.add_parser("inspect", help="a job with its transitions, attempts, parent and children")
        inspect.add_argument("job_id")
        self.add_json(inspect)
        logs = actions.add_parser("logs", help="query finished attempts in job_log")
        logs.add_argument("--job-id")
        logs.add_argument("--plugin")
        logs.add_argument("--command")
        logs.add_argument("--status", help="queued|running|succeeded|failed|timed_out|dead (or pending, ok, error)")
        logs.add_argument("--submitted-by")
        logs.add_argument("--from", dest="from_", metavar="RFC3339", help="completed at or after")
        logs.add_argument("--to", metavar="RFC3339", help="completed at or before")
        logs.add_argument("--query", help="text searched in last_error, stderr and result")
        logs.add_argument("--limit", type=int, default=50, help=f"rows (default 50, at most {MAX_LOG_LIMIT})")
        logs.add_argument("--include-result", action="store_true", help="include each full plugin response")
        self.add_json(logs)

    def handle(self, *args: Any, **options: Any) -> None:
        self.open_ledger()
        self.verbose = options["verbosity"] > 0
        if options["action"] == "inspect":
            self.inspect(options["job_id"])
        else:
            self.logs(options)

    def inspect(self, job_id: str) -> None:
        job = Job.objects.filter(pk=job_id).first()
        if job is None:
            raise Exit(EXIT_FAILED, f"no job with id {job_id!r}")
        data = job_detail(job)

        def text() -> str:
            lines = [
                f"job {job.id}  {job.plugin}.{job.command}  {job.status}  attempt {job.attempt}/{job.max_attempts}",
                f"submitted by {job.submitted_by} at {data['created_at']}",
            ]
            if data["parent"]:
                p = data["parent"]
                lines.append(f"parent: {p['job_id']} {p['plugin']}.{p['command']} {p['status']}")
            if job.last_error:
                lines.append(f"last error: {job.last_error}")
            lines.append("transitions:")
            lines += [f"  {t['at']}  {t['from'] or '-'} -> {t['to']}  {t['reason']}" for t in data["transitions"]]
            for attempt in data["attempts"]:
                lines.append(f"attempt {attempt['attempt']}: {attempt['status']} at {attempt['completed_at']}")
                if attempt["result"] is not None:
                    lines.append(f"  response: {json.dumps(attempt['result'])[:2000]}")
                if attempt["stderr"]:
                    lines.append("  stderr: " + attempt["stderr"][:2000].rstrip().replace("\n", "\n          "))
            for child in data["children"]:
                lines.append(f"child: {child['job_id']} {child['plugin']}.{child['command']} {child['status']}")
            if self.verbose and data["context"]:
                lines.append(f"context: {json.dumps(data['context'])}")
            return "\n".join(lines)

        self.emit(data, text)

    def logs(self, options: dict[str, Any]) -> None:
        limit = options["limit"]
        if not 1 <= limit <= MAX_LOG_LIMIT:
            raise Exit(EXIT_USAGE, f"--limit must be between 1 and {MAX_LOG_LIMIT}")
        rows = JobLog.objects.all()
        for field in ("job_id", "plugin", "command", "submitted_by"):
            if options[field]:
                rows = rows.filter(**{field: options[field]})
        if options["status"]:
            try:
                rows = rows.filter(status=normalise_status(options["status"]))
            except ValueError as exc:
                raise Exit(EXIT_USAGE, str(exc)) from exc
        if (start := rfc3339(options["from_"], "--from")) is not None:
            rows = rows.filter(completed_at__gte=start)
        if (end := rfc3339(options["to"], "--to")) is not None:
            rows = rows.filter(completed_at__lte=end)
        if options["query"]:
            q = options["query"]
            rows = rows.filter(Q(last_error__icontains=q) | Q(stderr__icontains=q) | Q(result__icontains=q))
        total = rows.count()
        entries = [
            log_entry(r, include_result=options["include_result"]) for r in rows.order_by("-completed_at")[:limit]
        ]
        data = {"logs": entries, "total": total}

        def text() -> str:
            lines = [
                f"{e['completed_at']}  {e['status']:9} {e['plugin']}.{e['command']}  {e['job_id']}  "
                f"#{e['attempt']}" + (f"  {e['last_error']}" if e["last_error"] else "")
                for e in entries
            ]
            lines.append(f"({len(entries)} of {total})")
            return "\n".join(lines)

        self.emit(data, text)
