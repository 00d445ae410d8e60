"""What an MCP client may see and call: every tool and resource of the loaded runtime, each with
the API scopes that reach it, filtered for one caller. Pure (no I/O), so a `tools/list` with a
hundred plugins costs what building a hundred dicts costs, and the same catalogue answers both
transports.

Names. Plugin commands are `plugin.<plugin>.<command>` and pipelines `pipeline.<name>`, the names
`/skills` gives them; the gateway's own verbs are `job.*`, `event.publish`, `pipelines.*` and
`system.*`, which no plugin or pipeline name can take (those always carry their prefix).

Scopes are the API's, alternatives as its views list them (`ApiToken.allows`): a plugin command
needs what `POST /plugin/{plugin}/{command}` needs for its type, a pipeline `plugin:rw`, a read of
jobs the finer read scope of its endpoint. The verbs an operator uses on another's job (replay,
cancel, retry) need `jobs:rw`: the API has no such route, and a token that may only read jobs
must not change them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from gateway.config.frozen import thaw
from gateway.config.tokens import RESULT_FIELDS, RESULTS, ApiToken
from gateway.reports.skills import command_scopes, expand_input_schema
from gateway.runtime import Runtime

PLUGIN_PREFIX = "plugin."
PIPELINE_PREFIX = "pipeline."
# A job id, as the triggers return it (the CLI's 8-character prefixes are for people at a terminal).
JOB_ID = {"type": "string", "minLength": 1, "maxLength": 64, "description": "A job id, as a trigger returned it."}
PAYLOAD = {"type": "object", "description": "The trigger event's payload.", "additionalProperties": True}
OPEN_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}


@dataclass(frozen=True)
class Caller:
    """Who calls: an API token's holder, or (`token` None) the local user of `ductile mcp`
    without a token, who has every scope, as the local CLI has (docs/mcp.md says why)."""

    token: ApiToken | None

    def allows(self, scopes: Sequence[str] | None) -> bool:
        return scopes is None or self.token is None or self.token.allows(*scopes)

    @property
    def name(self) -> str | None:
        """Who is recorded after `mcp` in what the ledger keeps (`submitted_by`, a transition's reason)."""
        return self.token.name if self.token is not None else None

    def shaped(self, row: dict[str, Any]) -> dict[str, Any]:
        """`row` as this caller may see it: without what plugins wrote unless it reads results."""
        if self.allows((RESULTS,)):
            return row
        return {k: v for k, v in row.items() if k not in RESULT_FIELDS}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    scopes: tuple[str, ...] | None  # alternatives, any one enough; None: any caller
    read_only: bool
    # What the call does: ("plugin", plugin, command), ("pipeline", name), or (verb,).
    action: tuple[str, ...]
    idempotent: bool = False
    # Whether the call holds its answer open while a job runs (job.wait): a stream, capped as one.
    streams: bool = False
    title: str = ""

    def as_mcp(self) -> dict[str, Any]:
        """The `tools/list` entry (MCP's Tool, camelCase keys)."""
        annotations = {
            "title": self.title or self.name,
            "readOnlyHint": self.read_only,
            "destructiveHint": not self.read_only,
            "idempotentHint": self.idempotent,
            # Plugin commands reach whatever their plugin reaches; the gateway's verbs its ledger.
            "openWorldHint": self.action[0] in ("plugin", "pipeline"),
        }
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": annotations,
        }


def _object(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _verbs() -> list[Tool]:
    job = _object({"job_id": JOB_ID}, ["job_id"])
    return [
        Tool(
            "job.inspect",
            "A job: its status, attempts, transitions, timing, parent and its whole tree. What plugins "
            "wrote (result, errors, stderr) needs jobs:result:ro.",
            job,
            ("jobs:status:ro",),
            True,
            ("job.inspect",),
            idempotent=True,
        ),
        Tool(
            "job.logs",
            "Finished attempts, newest first, filtered. `query` searches results, errors and stderr (needs "
            "jobs:result:ro).",
            _object(
                {
                    "job_id": JOB_ID,
                    "plugin": {"type": "string", "maxLength": 200},
                    "command": {"type": "string", "maxLength": 200},
                    "status": {"type": "string", "maxLength": 20},
                    "submitted_by": {"type": "string", "maxLength": 200},
                    "query": {"type": "string", "maxLength": 1000},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50},
                    "include_result": {"type": "boolean", "default": False},
                }
            ),
            ("jobs:logs:ro",),
            True,
            ("job.logs",),
            idempotent=True,
        ),
        Tool(
            "job.wait",
            "Wait until a job and every job it led to have finished, or `timeout_secs` passed; progress "
            "notifications (finished jobs of the tree) while it runs. Answers the tree.",
            _object(
                {"job_id": JOB_ID, "timeout_secs": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600}},
                ["job_id"],
            ),
            ("jobs:status:ro",),
            True,
            ("job.wait",),
            idempotent=True,
            streams=True,
        ),
        Tool(
            "event.publish",
            "Publish a root event: every pipeline whose `on:` matches its type starts. Answers the started "
            "job ids at once.",
            _object(
                {
                    "type": {"type": "string", "minLength": 1, "maxLength": 200},
                    "payload": PAYLOAD,
                    "dedupe_key": {"type": "string", "maxLength": 512},
                },
                ["type"],
            ),
            ("events:rw",),
            False,
            ("event.publish",),
        ),
        Tool(
            "pipelines.dry_run",
            "Which steps a pipeline would run for this payload, with payloads, baggage and switch decisions; "
            "nothing is enqueued.",
            _object({"name": {"type": "string", "maxLength": 200}, "payload": PAYLOAD}, ["name"]),
            ("plugin:ro",),
            True,
            ("pipelines.dry_run",),
            idempotent=True,
        ),
        Tool(
            "pipelines.visualize",
            "A pipeline as a Mermaid flowchart.",
            _object({"name": {"type": "string", "maxLength": 200}}, ["name"]),
            ("plugin:ro",),
            True,
            ("pipelines.visualize",),
            idempotent=True,
        ),
        Tool(
            "system.status",
            "Health and queue: depth per status, retries waiting, live workers, loaded plugins, open circuits, "
            "plugins no live worker serves.",
            _object({}),
            ("jobs:status:ro",),
            True,
            ("system.status",),
            idempotent=True,
        ),
        Tool(
            "system.doctor",
            "What loads but cannot work as meant: skipped plugins, route loops, unknown scopes, unused plugins, "
            "plugins with queued jobs no live node runs.",
            _object({}),
            ("*",),
            True,
            ("system.doctor",),
            idempotent=True,
        ),
        Tool(
            "job.replay",
            "A new job for the same step from the finished job's stored context (same event, payload, "
            "baggage, parent). Answers its id at once.",
            job,
            ("jobs:rw",),
            False,
            ("job.replay",),
        ),
        Tool(
            "job.cancel",
            "A queued job that must not run: it ends dead, 'cancelled by mcp:<token>'.",
            job,
            ("jobs:rw",),
            False,
            ("job.cancel",),
        ),
        Tool(
            "job.retry",
            "A failed, timed_out or dead job: queued again for one more attempt, due now.",
            job,
            ("jobs:rw",),
            False,
            ("job.retry",),
        ),
    ]


VERBS: tuple[Tool, ...] = tuple(_verbs())
VERB_NAMES = frozenset(t.name for t in VERBS)


@dataclass
class Catalogue:
    """Every tool of one runtime, by name; built once per runtime (`catalogue`) and filtered per caller."""

    tools: dict[str, Tool] = field(default_factory=dict)
    fingerprint: str = ""

    listed: dict[str, types.Tool] = field(default_factory=dict)

    def visible(self, caller: Caller) -> list[Tool]:
        return [t for t in self.tools.values() if caller.allows(t.scopes)]

    def listing(self, caller: Caller) -> types.ListToolsResult:
        """`tools/list`'s answer for `caller`, of models built once per runtime."""
        if not self.listed:
            self.listed = {name: types.Tool.model_validate(t.as_mcp()) for name, t in self.tools.items()}
        return types.ListToolsResult(tools=[self.listed[t.name] for t in self.visible(caller)])


def _plugin_tools(runtime: Runtime) -> list[Tool]:
    found = []
    for name, instance in sorted(runtime.registry.instances.items()):
        for command in instance.manifest.commands.values():
            read = command.type == "read"
            declared = command.input_schema
            schema = expand_input_schema(declared) if declared is not None else dict(OPEN_OBJECT)
            if schema.get("type") != "object":
                # MCP's inputSchema is an object; a payload declared otherwise is refused by the
                # intake's object check anyway (a trigger's payload is always an object).
                schema = {**OPEN_OBJECT, "description": f"The manifest declares {json.dumps(thaw(declared))[:200]}"}
            found.append(
                Tool(
                    f"{PLUGIN_PREFIX}{name}.{command.name}",
                    (command.description or f"{name}: {command.name}")
                    + f" (plugin {name}, a {'read' if read else 'write'} command; the arguments are its payload; "
                    "answers the job id at once: job.wait follows it)",
                    schema,
                    command_scopes(name, command.type),
                    read,
                    ("plugin", name, command.name),
                    idempotent=read if command.idempotent is None else command.idempotent,
                )
            )
    return found


def _pipeline_tools(runtime: Runtime) -> list[Tool]:
    found = []
    for pipeline in sorted(runtime.pipelines.pipelines.values(), key=lambda p: p.name):
        if pipeline.is_hook:
            continue
        found.append(
            Tool(
                f"{PIPELINE_PREFIX}{pipeline.name}",
                f"Start pipeline {pipeline.name} (trigger {pipeline.trigger}) at its entry steps; the arguments "
                "are the trigger event's payload. Answers the root job ids at once: job.wait follows them.",
                dict(OPEN_OBJECT),
                ("plugin:rw",),
                False,
                ("pipeline", pipeline.name),
            )
        )
    return found


_BUILT: dict[int, tuple[Runtime, Catalogue]] = {}


def catalogue(runtime: Runtime) -> Catalogue:
    """The tools of `runtime`, built at its first ask (a reload makes a new runtime, and so a new
    catalogue); the last one is kept."""
    built = _BUILT.get(id(runtime))
    if built is not None and built[0] is runtime:
        return built[1]
    tools = {t.name: t for t in [*_plugin_tools(runtime), *_pipeline_tools(runtime), *VERBS]}
    listing = json.dumps([t.as_mcp() for t in tools.values()], sort_keys=True, default=str)
    made = Catalogue(tools, hashlib.blake2b(listing.encode(), digest_size=16).hexdigest())
    _BUILT.clear()
    _BUILT[id(runtime)] = (runtime, made)
    return made
