"""`job inspect ID`, `job logs`, and an operator's `job replay|cancel|retry ID` (the audit
console's buttons do the same through the same ledger methods)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser

from gateway import intake
from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit
from gateway.cli.nouns import NOUNS
from gateway.operations import CLI, replay
from gateway.reports import MAX_LOGS, claims_only, depth_first, find_logs, job_detail, parse_rfc3339
from gateway.terminal import one_line
from ledger.models import EventContext, Job, LostJob
from ledger.states import ActionRefused, JobStatus


def time_flag(value: str | None, flag: str) -> datetime | None:
    """`--from`/`--to` read as RFC 3339; a usage error naming the flag otherwise."""
    if value is None:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        raise Exit(EXIT_USAGE, f"{flag} {exc}") from None


# `job logs --json` as the original prints it (its JobLogEntry, Go's field names), beside ours: the
# spec's health-check and operator scripts read `Status`, `CreatedAt`, `LastError`, `JobID`,
# `Result` (spec 000, "Health Check" and "Operator Handbook"), and must work as printed there.
ORIGINAL_LOG_KEYS = {
    "job_id": "JobID",
    "log_id": "LogID",
    "plugin": "Plugin",
    "command": "Command",
    "status": "Status",
    "attempt": "Attempt",
    "submitted_by": "SubmittedBy",
    "created_at": "CreatedAt",
    "completed_at": "CompletedAt",
    "last_error": "LastError",
    "stderr": "Stderr",
    "result": "Result",
}


def with_original_keys(entry: dict[str, Any]) -> dict[str, Any]:
    """`entry` with the original's key for each field too (`Result` null unless asked for, as
    the original's empty raw message)."""
    return {**entry, **{theirs: entry.get(ours) for ours, theirs in ORIGINAL_LOG_KEYS.items()}}


def tree_lines(tree: list[dict[str, Any]], verbose: bool) -> list[str]:
    """One line per hop, right under its parent; baggage where a hop changed it (every hop with
    `-v`, which also shows the core's `ductile.*` control fields, the event that reached the hop and
    the baggage paths it merged in)."""
    baggage_of = {hop["job_id"]: hop["baggage"] for hop in tree}
    lines = []
    for hop, level in depth_first(tree, lambda h: h["job_id"], lambda h: h["parent_job_id"]):
        parent = hop["parent_job_id"]
        pad = "  " * (level + 1)
        where = f"  {hop['pipeline']}:{hop['step']}" if hop["pipeline"] else ""
        mark = "  <- this job" if hop["this_job"] else ""
        lines.append(f"{pad}{hop['status']:9} {hop['plugin']}.{hop['command']}{where}  {hop['job_id']}{mark}")
        if hop["last_error"]:
            lines.append(f"{pad}  error: {one_line(hop['last_error'])}")
        if verbose:
            lines.append(f"{pad}  on {hop['event_type']} at depth {hop['route_depth']}")
            if hop["baggage_added"]:
                lines.append(f"{pad}  merged: {', '.join(hop['baggage_added'])}")
        shown = hop["baggage"] if verbose else claims_only(hop["baggage"])
        if shown and (verbose or claims_only(baggage_of.get(parent)) != shown):
            lines.append(f"{pad}  baggage {json.dumps(shown, sort_keys=True)}")
    return lines


# Ids shown in lists: `job logs`, `system watch` and the console print a job's first 8 characters.
SHOWN_MATCHES = 10
ID_LENGTH = 36


def find_job(id_or_prefix: str) -> Job:
    """The job whose id is `id_or_prefix`, or the one job whose id starts with it (the 8 characters
    every view prints); none, or several, is refused naming what was found."""
    text = id_or_prefix.strip().lower()
    job = Job.objects.filter(pk=text).first() if text else None
    if job is not None:
        return job
    if not text or text.strip("0123456789abcdef-"):
        raise Exit(EXIT_FAILED, f"no job with id {id_or_prefix!r} (a job id is hex digits and dashes)")
    # A scan of the ids (a prefix LIKE uses no index on SQLite): a one-off lookup, ~0.1 s at 300,000 jobs.
    found = Job.objects.filter(pk__startswith=text)
    matches = list(found.order_by("-created_at").values_list("pk", flat=True)[: SHOWN_MATCHES + 1])
    if not matches:
        raise Exit(EXIT_FAILED, f"no job with id {id_or_prefix!r}, nor one whose id starts with it")
    if len(matches) > 1:
        count = found.count() if len(matches) > SHOWN_MATCHES else len(matches)
        shown = ", ".join(matches[:SHOWN_MATCHES]) + (" …" if count > SHOWN_MATCHES else "")
        raise Exit(
            EXIT_USAGE,
            f"{id_or_prefix!r} is the start of {count} job ids ({shown}): give more of the id",
            {"matches": matches[:SHOWN_MATCHES], "count": count},
        )
    return Job.objects.get(pk=matches[0])


class Command(DuctileCommand):
    help = NOUNS["job"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        inspect = actions.add_parser("inspect", help="a job with its transitions, attempts and its whole tree")
        inspect.add_argument("job_id")
        self.add_json(inspect)
        replay = actions.add_parser("replay", help="a new job for the same step, from its stored event_context")
        replay.add_argument("job_id")
        replay.add_argument("--dry-run", action="store_true", help="show the job that would be enqueued")
        replay.add_argument("--wait", action="store_true", help="block until the replay's tree is terminal")
        replay.add_argument("--timeout", type=float, default=300.0, help="seconds --wait waits (default 300)")
        self.add_json(replay)
        for name, text in (
            ("cancel", "a queued job that must not run: it ends dead, 'cancelled by cli'"),
            ("retry", "a failed, timed_out or dead job: queued again for one more attempt, due now"),
        ):
            sub = actions.add_parser(name, help=text)
            sub.add_argument("job_id")
            sub.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
            self.add_json(sub)
        logs = actions.add_parser("logs", help="query finished attempts in job_log")
        logs.add_argument("--job-id")
        logs.add_argument("--plugin")
        logs.add_argument("--command")
        logs.add_argument("--status", help="queued|running|succeeded|failed|timed_out|dead (or pending, ok, error)")
        logs.add_argument("--submitted-by")
        logs.add_argument("--from", dest="from_", metavar="RFC3339", help="completed at or after")
        logs.add_argument("--to", metavar="RFC3339", help="completed at or before")
        logs.add_argument("--query", help="text searched in last_error, stderr and result")
        logs.add_argument("--limit", type=int, default=50, help=f"rows (default 50, at most {MAX_LOGS})")
        logs.add_argument("--include-result", action="store_true", help="include each full plugin response")
        self.add_json(logs)

    def handle(self, *args: Any, **options: Any) -> None:
        self.open_ledger()
        self.verbose = options["verbosity"] > 0
        if options["action"] == "inspect":
            self.inspect(options["job_id"])
        elif options["action"] == "replay":
            self.replay(options)
        elif options["action"] in ("cancel", "retry"):
            self.act(options["action"], options["job_id"], options["dry_run"])
        else:
            self.logs(options)

    def replay(self, options: dict[str, Any]) -> None:
        job = find_job(options["job_id"])
        runtime = self.runtime()
        try:
            spec = intake.replay(runtime, job, CLI.submitter)
        except ActionRefused as exc:
            raise Exit(EXIT_USAGE, str(exc)) from exc
        if options["dry_run"]:
            position = EventContext.objects.filter(pk=job.event_context_id).first() if job.event_context_id else None
            data = {
                "replay_of": job.id,
                "plugin": spec.plugin,
                "command": spec.command,
                "payload": spec.payload,
                "parent_job_id": spec.parent_job_id,
                "event_context_id": spec.event_context_id,
                "pipeline": position.pipeline_name if position else None,
                "step": position.step_id if position else None,
                "baggage": position.accumulated_json if position else None,
            }
            self.emit(data, lambda: "would enqueue (dry run):\n" + json.dumps(data, indent=2))
            return
        from gateway.management.commands.pipeline import run_tree  # replay's alone: pipelines' simulator and waiter

        run_tree(self, lambda: [replay(runtime, job, by=CLI)], wait=options["wait"], timeout=options["timeout"])

    def act(self, action: str, job_id: str, dry_run: bool) -> None:
        """`job cancel` (queued -> dead) and `job retry` (failed, timed_out or dead -> queued)."""
        job = find_job(job_id)
        before = job.status
        allowed = job.can_cancel if action == "cancel" else job.can_retry
        # A dry run the job's state refuses is still put to the ledger method: its refusal says why.
        try:
            if action == "cancel" and (not dry_run or not allowed):
                job.cancel(by=str(CLI))
            elif action == "retry" and (not dry_run or not allowed):
                job.retry_now(by=str(CLI))
        except ActionRefused as exc:
            raise Exit(EXIT_USAGE, str(exc)) from exc
        except LostJob as exc:
            raise Exit(EXIT_FAILED, f"{exc}: it changed while this ran; nothing was done") from exc
        after = JobStatus.DEAD if action == "cancel" else JobStatus.QUEUED
        data = {"job_id": job.id, "action": action, "from": before, "to": after, "dry_run": dry_run}
        if not dry_run:
            data["attempt"], data["max_attempts"] = job.attempt, job.max_attempts
        verb = {"cancel": "cancelled", "retry": "queued again"}[action]
        self.emit(data, f"{'would be ' if dry_run else ''}{verb}: {job.id} ({before} -> {after})")

    def inspect(self, job_id: str) -> None:
        job = find_job(job_id)
        data = job_detail(job)

        def text() -> str:
            lines = [
                f"job {job.id}  {job.plugin}.{job.command}  {job.status}  attempt {job.attempt}/{job.max_attempts}",
                f"submitted by {job.submitted_by} at {data['created_at']}",
            ]
            if data["parent"]:
                p = data["parent"]
                lines.append(f"parent: {p['job_id']} {p['plugin']}.{p['command']} {p['status']}")
            if data["last_error"]:
                lines.append(f"last error: {one_line(data['last_error'])}")
            lines.append("transitions:")
            lines += [
                f"  {t['at']}  {t['from'] or '-'} -> {t['to']}  {one_line(t['reason'] or '')}"
                for t in data["transitions"]
            ]
            profiles = {a["attempt"]: a["sandbox"] for a in data["job_attempts"]}
            for attempt in data["attempts"]:
                lines.append(f"attempt {attempt['attempt']}: {attempt['status']} at {attempt['completed_at']}")
                if profiles.get(attempt["attempt"]):
                    lines.append(f"  sandbox: {profiles[attempt['attempt']]}")
                lines += [
                    f"  egress: {e['host']} {e['verdict']} ({e['requests']} request{'s' * (e['requests'] != 1)})"
                    for e in data["egress"]
                    if e["attempt"] == attempt["attempt"]
                ]
                if attempt["result"] is not None:
                    lines.append(f"  response: {json.dumps(attempt['result'])[:2000]}")
                if attempt["stderr"]:
                    lines.append("  stderr: " + attempt["stderr"][:2000].rstrip().replace("\n", "\n          "))
            lines.append("tree:")
            lines += tree_lines(data["tree"], self.verbose)
            return "\n".join(lines)

        self.emit(data, text)

    def logs(self, options: dict[str, Any]) -> None:
        if options["job_id"] and len(options["job_id"]) < ID_LENGTH:
            options["job_id"] = find_job(options["job_id"]).id
        try:
            entries, total = find_logs(
                {k: options[k] for k in ("job_id", "plugin", "command", "submitted_by", "status", "query")},
                start=time_flag(options["from_"], "--from"),
                end=time_flag(options["to"], "--to"),
                limit=options["limit"],
                include_result=options["include_result"],
            )
        except ValueError as exc:
            raise Exit(EXIT_USAGE, str(exc)) from exc
        data = {"logs": [with_original_keys(e) for e in entries], "total": total}

        def text() -> str:
            lines = [
                f"{e['completed_at']}  {e['status']:9} {e['plugin']}.{e['command']}  {e['job_id']}  "
                f"#{e['attempt']}" + (f"  {one_line(e['last_error'])}" if e["last_error"] else "")
                for e in entries
            ]
            lines.append(f"({len(entries)} of {total})")
            return "\n".join(lines)

        self.emit(data, text)
