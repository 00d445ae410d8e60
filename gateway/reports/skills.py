"""What the gateway can do, described for agents: every plugin command and callable pipeline as a
skill (spec 000 "Skills Index"; Operator Handbook "LLM capability discovery"). One builder for
`GET /skills` and the `skills` command (`--json` is the same data; Markdown otherwise), and the
pieces the OpenAPI document shares with it: which scopes invoke a command, and a manifest's
`input_schema` as JSON Schema.

Semantic anchors, per command: `mutates_state` is its `type` (write commands change external
state; `write` when the manifest leaves it out, the spec's paranoid default). `idempotent` and
`retry_safe` are the manifest's hints; left out, they follow the type (spec §4 "Command type
semantics": read commands are idempotent and safe for automated retries; a write command is
assumed neither).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.config.frozen import thaw
from gateway.plugins.manifest import CommandSpec
from gateway.runtime import Runtime
from pipelines.dsl import SWITCH_TRUE, Pipeline

# Keys that make an `input_schema` a JSON Schema rather than the compact `field: type` map. The
# original reads only `type`; a schema built from `properties` or combinators is one too.
_SCHEMA_KEYS = frozenset({"type", "properties", "$ref", "$schema", "allOf", "anyOf", "oneOf"})


def command_scopes(plugin: str, kind: str) -> tuple[str, ...]:
    """A manifest command's `type` decides the scope: read commands need `ro`, others `rw`."""
    access = "ro" if kind == "read" else "rw"
    return (f"plugin:{access}", f"{plugin}:{access}")


def expand_input_schema(declared: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest `input_schema` as JSON Schema: a compact `{field: type}` map becomes an object
    with those properties (a non-string value is kept as that field's schema). A schema that is
    still not valid JSON Schema is replaced by a bare object saying why, so one plugin's mistake
    cannot make the whole document invalid."""
    schema = thaw(declared)
    if not _SCHEMA_KEYS & schema.keys():
        properties = {name: {"type": kind} if isinstance(kind, str) else kind for name, kind in schema.items()}
        schema = {"type": "object", "properties": properties}
    # Imported here: a process that never describes a plugin's input (a worker, most CLI
    # commands) does not pay for jsonschema at its start (gateway.config.validity).
    from jsonschema import Draft202012Validator, SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return {"type": "object", "description": f"The manifest's input_schema is not valid JSON Schema: {exc.message}"}
    return schema


def plugin_skill(plugin: str, command: CommandSpec) -> dict[str, Any]:
    read = command.type == "read"
    return {
        "name": f"plugin.{plugin}.{command.name}",
        "kind": "plugin",
        "description": command.description or f"{plugin}: {command.name}",
        "endpoint": f"/plugin/{plugin}/{command.name}",
        "tier": "READ" if read else "WRITE",
        "plugin": plugin,
        "command": command.name,
        "scopes": list(command_scopes(plugin, command.type)),
        "mutates_state": not read,
        "idempotent": read if command.idempotent is None else command.idempotent,
        "retry_safe": read if command.retry_safe is None else command.retry_safe,
        "input_schema": None if command.input_schema is None else expand_input_schema(command.input_schema),
    }


def pipeline_skill(pipeline: Pipeline) -> dict[str, Any]:
    """Its plugin steps in definition order, each with the steps whose finish starts it (`after`)
    and the `if:` that gates it (compiled into a switch hop just before it, folded back here)."""
    gates: dict[str, Any] = {}
    after: dict[str, list[str]] = {node_id: [] for node_id in pipeline.nodes}
    for node in pipeline.nodes.values():
        if node.kind == "switch":
            for target in pipeline.next_nodes(node.id, SWITCH_TRUE):
                gates[target] = thaw(node.condition)
    for node_id, edges in pipeline.edges.items():
        for _, target in edges:
            after[target].append(node_id)
    steps = []
    for node in pipeline.nodes.values():
        if node.kind != "uses":
            continue
        step: dict[str, Any] = {"id": node.id, "plugin": node.plugin, "command": node.command}
        # A switch's predecessors stand for it: the step runs after them, if the condition holds.
        step["after"] = sorted(
            {p for a in after[node.id] for p in (after[a] if pipeline.nodes[a].kind == "switch" else [a])}
        )
        if node.id in gates:
            step["if"] = gates[node.id]
        steps.append(step)
    return {
        "name": f"pipeline.{pipeline.name}",
        "kind": "pipeline",
        "endpoint": f"/pipeline/{pipeline.name}",
        "pipeline": pipeline.name,
        "trigger": pipeline.trigger,
        "execution_mode": "synchronous" if pipeline.execution_mode == "synchronous" else "asynchronous",
        "timeout_secs": pipeline.timeout,
        "scopes": ["plugin:rw"],
        "entry_steps": [n for e in pipeline.entries for n in _plugin_steps(pipeline, e)],
        "steps": steps,
        **({"if": thaw(pipeline.condition)} if pipeline.condition else {}),
    }


def _plugin_steps(pipeline: Pipeline, node_id: str) -> list[str]:
    """`node_id`, or for a switch the steps it gates."""
    if pipeline.nodes[node_id].kind != "switch":
        return [node_id]
    return pipeline.next_nodes(node_id, SWITCH_TRUE)


def skills(runtime: Runtime) -> list[dict[str, Any]]:
    """Every plugin command, then every pipeline an API caller can start (hooks are started by
    lifecycle signals, not callable), each sorted by name."""
    found = [
        plugin_skill(name, command)
        for name, instance in sorted(runtime.registry.instances.items())
        for command in instance.manifest.commands.values()
    ]
    for pipeline in sorted(runtime.pipelines.pipelines.values(), key=lambda p: p.name):
        if not pipeline.is_hook:
            found.append(pipeline_skill(pipeline))
    return found


# -- Markdown, for an LLM's context ------------------------------------------------------------

PREAMBLE = """\
Every skill is invoked over the gateway's HTTP API with `Authorization: Bearer <token>`; the token
needs one of the skill's scopes (`*` grants all, a `rw` scope implies its `ro`). The body is
`{"payload": {...}}`, the payload described by the skill's input schema. Plugin commands answer
`202 {"job_id": ...}` (poll `GET /job/{job_id}`); asynchronous pipelines answer 202, synchronous
ones wait and answer 200 with the result and the job tree (add `?async=true` not to wait).
The same data as JSON: `ductile skills --json` or `GET /skills`."""


def _flag(value: bool) -> str:
    return "yes" if value else "no"


def markdown(entries: list[dict[str, Any]], *, version: str, config_dir: str) -> str:
    plugins = [s for s in entries if s["kind"] == "plugin"]
    pipelines = [s for s in entries if s["kind"] == "pipeline"]
    out = ["# Ductile skills", "", f"Gateway {version}, config `{config_dir}`.", "", PREAMBLE, ""]
    out += [f"## Plugin commands ({len(plugins)})", ""]
    if not plugins:
        out += ["No plugin is loaded.", ""]
    for s in plugins:
        out += [
            f"### {s['name']}",
            "",
            s["description"],
            "",
            f"- endpoint: `POST {s['endpoint']}`",
            f"- tier: {s['tier']}; scopes: {' or '.join(f'`{x}`' for x in s['scopes'])}",
            f"- mutates_state: {_flag(s['mutates_state'])}; idempotent: {_flag(s['idempotent'])}; "
            f"retry_safe: {_flag(s['retry_safe'])}",
        ]
        if s["input_schema"] is None:
            out += ["- input: none declared (send `{}` or any payload the plugin documents)", ""]
        else:
            schema = json.dumps(s["input_schema"])
            if len(schema) > 100:  # short schemas stay on one line: fewer tokens, as readable
                schema = json.dumps(s["input_schema"], indent=2)
            out += ["- input schema (the `payload`):", "", "```json", schema, "```", ""]
    out += [f"## Pipelines ({len(pipelines)})", ""]
    if not pipelines:
        out += ["No callable pipeline is configured.", ""]
    for s in pipelines:
        mode = s["execution_mode"]
        if mode == "synchronous":
            mode += f" (waits up to {s['timeout_secs']:g} s)"
        out += [
            f"### {s['name']}",
            "",
            f"- endpoint: `POST {s['endpoint']}`; scopes: `plugin:rw`",
            f"- trigger: `{s['trigger']}`",
            f"- mode: {mode}",
            *([f"- starts only if {json.dumps(s['if'])}"] if "if" in s else []),
            f"- entry steps: {', '.join(s['entry_steps']) or '(none)'}",
            "- steps:",
        ]
        for step in s["steps"]:
            line = f"  - `{step['id']}`: {step['plugin']}.{step['command']}"
            if step["after"]:
                line += f", after {', '.join(step['after'])}"
            if "if" in step:
                line += f", only if {json.dumps(step['if'])}"
            out.append(line)
        out.append("")
    return "\n".join(out).rstrip() + "\n"
