"""`pipeline list | show NAME | visualize NAME | run NAME`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from gateway import intake
from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit, json_object
from gateway.cli.nouns import NOUNS
from gateway.intake.events import pipeline_entries, pipeline_starts, preview
from gateway.intake.trees import TreeWaiter
from gateway.reports import claims_only
from gateway.runtime import Runtime
from gateway.terminal import one_line
from ledger.states import JobStatus
from ledger.submitters import Submitter
from pipelines.dsl import Pipeline
from pipelines.visualize import mermaid


def payload_option(raw: str | None) -> dict[str, Any]:
    return json_object(raw, "--payload") or {}


def run_tree(command: DuctileCommand, start: Callable[[], list[str]], *, wait: bool, timeout: float) -> None:
    """Enqueue through `start`; with `wait`, block on the tree's finish wake-ups and print it.
    Exit 1 when a job in the tree did not succeed or the tree outlived `timeout`."""
    if not wait:
        ids = start()
        command.emit({"job_ids": ids, "status": "queued"}, "\n".join(f"queued {j}" for j in ids))
        return
    with TreeWaiter() as waiter:
        outcome = waiter.wait(start(), timeout)
    data = {**outcome.report(), "complete": outcome.complete}

    def text() -> str:
        lines = [
            f"{j.created_at:%H:%M:%S} {j.status:9} {j.plugin}.{j.command} {j.id}"
            + (f"  {one_line(j.last_error)}" if j.last_error else "")
            for j in outcome.jobs
        ]
        if outcome.complete:
            lines.append(f"{outcome.status} in {outcome.duration_ms} ms")
        elif outcome.unread is not None:
            root = outcome.root_ids[0]
            lines.append(
                f"started, but its jobs could not be read within {timeout:g}s ({outcome.unread}); "
                f"follow it with `ductile job inspect {root}`"
            )
        else:
            lines.append(f"still running after {timeout:g}s")
        return "\n".join(lines)

    command.emit(data, text)
    if outcome.status != JobStatus.SUCCEEDED:
        raise SystemExit(EXIT_FAILED)


def dry_run_text(preview: dict[str, Any], verbose: bool) -> str:
    """The hops as an indented tree; `-v` adds the event that reached each hop and its baggage
    even when unchanged from the parent."""
    hops = preview["hops"]
    if not hops:
        return "nothing would run (no pipeline entry matched)"
    depth_of: dict[int, int] = {}
    lines = []
    for hop in hops:
        level = 0 if hop["parent"] is None else depth_of[hop["parent"]] + 1
        depth_of[hop["index"]] = level
        pad = "  " * level
        where = f"{hop['pipeline']}:{hop['step']}" if hop["pipeline"] else "(route)"
        relay = hop["relay"]
        does = f"relay {relay['event']} to {relay['to']}" if relay else f"{hop['plugin']}.{hop['command']}"
        head = f"{pad}#{hop['index']} {where}  {does}  depth {hop['depth']}"
        if hop["decision"] is not None:
            head += f"  -> {hop['decision']}"
        if hop["refusal"]:
            head += f"  WOULD STOP: {hop['refusal']}"
        lines.append(head)
        if verbose:
            lines.append(f"{pad}   on {hop['event_type']}")
        if hop["plugin"] != "core.switch":
            lines.append(f"{pad}   payload {json.dumps(hop['payload'], sort_keys=True)}")
        if relay and "payload" in relay:
            sent = {k: relay[k] for k in ("payload", "dedupe_key", "baggage")}
            lines.append(f"{pad}   sends {json.dumps(sent, sort_keys=True)}")
        elif relay and "unknown" in relay:
            lines.append(f"{pad}   sends what upstream output decides: {relay['unknown']}")
        parent = hops[hop["parent"]] if hop["parent"] is not None else None
        shown = hop["context"] if verbose else claims_only(hop["context"])
        if shown and (verbose or parent is None or claims_only(parent["context"]) != shown):
            lines.append(f"{pad}   baggage {json.dumps(shown, sort_keys=True)}")
    if preview["truncated"]:
        lines.append(f"(cut after {len(hops)} hops)")
    lines.append(f"nothing enqueued; {preview['assumption']}")
    return "\n".join(lines)


class Command(DuctileCommand):
    help = NOUNS["pipeline"].summary

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
        dry = actions.add_parser("dry-run", help="which steps would run, with payloads, baggage, switch decisions")
        dry.add_argument("name")
        dry.add_argument("--payload", help="JSON object: the trigger event's payload")
        self.add_json(dry)
        run = actions.add_parser("run", help="start a pipeline at its entry steps")
        run.add_argument("name")
        run.add_argument("--payload", help="JSON object: the trigger event's payload")
        run.add_argument("--dedupe-key")
        run.add_argument("--dry-run", action="store_true", help="show what would run; enqueue nothing")
        mode = run.add_mutually_exclusive_group()
        mode.add_argument(
            "--wait",
            action="store_true",
            help="block until the job tree is terminal and print it (the default for execution_mode: synchronous)",
        )
        mode.add_argument("--async", dest="no_wait", action="store_true", help="never wait, even when synchronous")
        run.add_argument(
            "--timeout", type=float, help="seconds to wait (default: the pipeline's timeout when synchronous, else 300)"
        )
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
        elif options["action"] == "dry-run" or options.get("dry_run"):
            starts = pipeline_starts(runtime, pipeline.name, payload_option(options["payload"]), source="cli")
            data = {"pipeline": pipeline.name, **preview(runtime, starts)}
            self.emit(data, lambda: dry_run_text(data, options["verbosity"] > 0))
        else:
            self.run(runtime, pipeline, options)

    def run(self, runtime: Runtime, pipeline: Pipeline, options: dict[str, Any]) -> None:
        synchronous = pipeline.execution_mode == "synchronous" and not options["no_wait"]
        wait = options["wait"] or synchronous
        specs = pipeline_entries(
            runtime,
            pipeline.name,
            payload_option(options["payload"]),
            submitter=Submitter.CLI,
            dedupe_key=options["dedupe_key"],
        )
        if synchronous and len(specs) != 1:
            raise Exit(
                EXIT_USAGE,
                f"pipeline {pipeline.name!r} is synchronous but starts with {len(specs)} entry dispatches; "
                "use --async (or --wait to wait on every tree)",
            )
        timeout = options["timeout"] if options["timeout"] is not None else (pipeline.timeout if synchronous else 300.0)
        self.open_ledger()
        run_tree(self, lambda: intake.submit_ids(runtime, specs), wait=wait, timeout=timeout)

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
            "fingerprint": p.fingerprint(),
        }
