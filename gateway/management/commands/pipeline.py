"""`pipeline list | show NAME | visualize NAME | run NAME`."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit, json_object
from gateway.events import run_pipeline
from gateway.reports import job_summary, latest_result
from gateway.runtime import Runtime
from ledger.models import Job
from ledger.states import JobStatus
from pipelines.dsl import Pipeline
from pipelines.visualize import mermaid


def payload_option(raw: str | None) -> dict[str, Any]:
    return json_object(raw, "--payload") or {}


def wait_for_trees(root_ids: list[str], timeout: float) -> tuple[list[Job], bool]:
    """Block until every job under `root_ids` is terminal (or the timeout passes)."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = Job.objects.tree(root_ids)
        if all(j.is_terminal for j in jobs):
            return jobs, True
        if time.monotonic() >= deadline:
            return jobs, False
        time.sleep(0.05)


def tree_report(jobs: list[Job]) -> list[dict[str, Any]]:
    return [{**job_summary(j), "result": latest_result(j)} for j in jobs]


def emit_tree(command: DuctileCommand, root_ids: list[str], wait: bool, timeout: float) -> None:
    if not wait:
        command.emit({"job_ids": root_ids, "status": "queued"}, "\n".join(f"queued {j}" for j in root_ids))
        return
    jobs, complete = wait_for_trees(root_ids, timeout)
    failed = [j for j in jobs if j.status != JobStatus.SUCCEEDED]
    data = {"job_ids": root_ids, "complete": complete, "tree": tree_report(jobs)}

    def text() -> str:
        lines = [
            f"{j.created_at:%H:%M:%S} {j.status:9} {j.plugin}.{j.command} {j.id}"
            + (f"  {j.last_error}" if j.last_error else "")
            for j in jobs
        ]
        lines.append("complete" if complete else f"still running after {timeout:g}s")
        return "\n".join(lines)

    command.emit(data, text)
    if failed or not complete:
        raise SystemExit(EXIT_FAILED)


class Command(DuctileCommand):
    help = "Pipelines: `pipeline list`, `show NAME`, `visualize NAME`, `run NAME`."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        self.add_json(actions.add_parser("list", help="configured pipelines"))
        for name, text in (
            ("show", "a compiled pipeline: nodes, edges, routes"),
            ("visualize", "a Mermaid flowchart of a pipeline"),
        ):
            sub = actions.add_parser(name, help=text)
            sub.add_argument("name")
            self.add_json(sub)
        run = actions.add_parser("run", help="start a pipeline at its entry steps")
        run.add_argument("name")
        run.add_argument("--payload", help="JSON object: the trigger event's payload")
        run.add_argument("--dedupe-key")
        run.add_argument("--wait", action="store_true", help="block until the job tree is terminal and print it")
        run.add_argument("--timeout", type=float, default=300.0, help="seconds --wait waits (default 300)")
        self.add_json(run)

    def handle(self, *args: Any, **options: Any) -> None:
        runtime = self.runtime()
        if options["action"] == "list":
            rows = [self._summary(p) for p in runtime.pipelines.pipelines.values()]
            self.emit(
                {"pipelines": rows, "fingerprint": runtime.pipelines.fingerprint()},
                "\n".join(f"{r['name']:28} {r['trigger']:32} {r['execution_mode']:12} {r['steps']} steps" for r in rows)
                or "(no pipelines configured)",
            )
            return
        pipeline = self._pipeline(runtime, options["name"])
        if options["action"] == "show":
            data = {**self._summary(pipeline), **pipeline.shape()}
            self.emit(data, lambda: json.dumps(data, indent=2, default=str))
        elif options["action"] == "visualize":
            chart = mermaid(pipeline)
            self.emit({"pipeline": pipeline.name, "mermaid": chart}, chart)
        else:
            self.open_ledger()
            ids = run_pipeline(
                runtime,
                pipeline.name,
                payload_option(options["payload"]),
                submitted_by="cli",
                dedupe_key=options["dedupe_key"],
            )
            emit_tree(self, ids, options["wait"], options["timeout"])

    def _pipeline(self, runtime: Runtime, name: str) -> Pipeline:
        pipeline = runtime.pipelines.pipelines.get(name)
        if pipeline is None:
            known = ", ".join(sorted(runtime.pipelines.pipelines)) or "none configured"
            raise Exit(EXIT_USAGE, f"no pipeline named {name!r} (known: {known})")
        return pipeline

    @staticmethod
    def _summary(p: Pipeline) -> dict[str, Any]:
        return {
            "name": p.name,
            "trigger": ("hook:" if p.is_hook else "") + p.trigger,
            "from_plugin": p.from_plugin,
            "execution_mode": p.execution_mode,
            "timeout_secs": p.timeout,
            "max_depth": p.max_depth,
            "steps": sum(1 for n in p.nodes.values() if n.kind == "uses"),
            "entries": list(p.entries),
        }
