"""One MCP server for both transports (the official SDK's low-level `Server`): `ductile mcp` over
stdio (gateway/mcp/stdio.py) and Streamable HTTP at the API's `/mcp` (gateway/mcp/web.py).

The handlers run on the SDK's event loop; everything that touches Django (the ledger, the
intake, the read models) runs on a worker thread (`_blocking`), never on the loop. Who calls is
the transport's to say (`CallerOf`): the token the API authenticated for `/mcp`, or the one
`ductile mcp` was given.

A reload. Every RELOAD_CHECK_SECONDS the server looks whether its process serves a new runtime
(gunicorn's workers reload in place on SIGHUP; `ductile mcp` takes the snapshot `system start`
rewrote, `refresh`) whose tools or tokens differ, and publishes `tools/list_changed` and
`resources/list_changed` to every open `subscriptions/listen` stream (the 2026-07-28 protocol's
way; on the handshake era the SDK has no stream to carry them over stateless HTTP, and the next
`tools/list` reads the new catalogue anyway).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import anyio
import mcp_types as types
from django.db import DatabaseError
from mcp.server import Server, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourcesListChanged, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway import intake
from gateway.config.errors import ConfigError
from gateway.intake.trees import TreeWaiter
from gateway.logs import logger
from gateway.mcp import calls
from gateway.mcp.calls import ToolError
from gateway.mcp.catalogue import Caller, Tool, catalogue
from gateway.runtime import RUNTIME, Runtime
from gateway.version import gateway_version

log = logger("mcp")

RELOAD_CHECK_SECONDS = 1.0
# How often `job.wait` reports the tree's progress (and so at least how often it writes to a
# client that waits: a keep-alive of its own).
PROGRESS_SECONDS = 1.0
DEFAULT_WAIT_SECONDS = 60.0

INSTRUCTIONS = (
    "Ductile runs plugin commands and pipelines as jobs in a ledger. Tools named plugin.<plugin>.<command> and "
    "pipeline.<name> enqueue and answer a job id at once; job.wait follows a job and its tree to the end with "
    "progress; job.inspect and job.logs read what happened. Resources: ductile://skills (every skill as Markdown), "
    "ductile://job/{job_id} (a job's tree), ductile://pipeline/{name} (its Mermaid chart), ductile://config."
)

# Who calls, from the request's context; ToolError when no caller may (a token no longer valid).
CallerOf = Callable[[ServerRequestContext[Any, Any]], Caller]
T = TypeVar("T")


async def _blocking(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` on a worker thread with a sound database connection."""

    def run() -> T:
        calls.fresh_connection()
        return function(*args)

    return await anyio.to_thread.run_sync(run)


def _answer(data: Any) -> types.CallToolResult:
    shown = RUNTIME.scrubber().json(data)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(shown, default=str))],
        structured_content=shown if isinstance(shown, dict) else None,
    )


def _refusal(message: str) -> types.CallToolResult:
    text = RUNTIME.scrubber().text(message)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def build_server(
    caller_of: CallerOf, *, refresh: Callable[[], None] | None = None, announces: bool = True
) -> Server[Any]:
    """`refresh`: what takes a new runtime in this process (stdio); it also means the connection
    stands, so a handshake-era client is told of a reload on it directly. `announces`: whether
    this server tells its listen streams of a reload (a server that serves none need not look)."""
    bus = InMemorySubscriptionBus()
    standing: set[ServerSession] = set()

    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as group:
            if announces:
                group.start_soon(_watch_reloads, bus, refresh, standing)
            yield {}
            group.cancel_scope.cancel()

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        caller = caller_of(ctx)
        if refresh is not None and ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            standing.add(ctx.session)
        return catalogue(RUNTIME.get()).listing(caller)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            caller = caller_of(ctx)
            runtime = RUNTIME.get()
            tool = catalogue(runtime).tools.get(params.name)
            if tool is None:
                raise ToolError(f"no tool named {params.name!r} (tools/list names them)")
            if not caller.allows(tool.scopes):
                raise ToolError(f"token lacks scope: {tool.name} needs one of {', '.join(tool.scopes or ())}")
            if tool.action[0] == "job.wait":
                arguments = await _blocking(_checked, tool, params.arguments)
                return _answer(await _wait(ctx, caller, runtime, arguments))
            # One trip to a worker thread for the whole call: each costs a hand-over of the GIL.
            return _answer(await _blocking(_checked_and_performed, runtime, caller, tool, params.arguments))
        except ToolError as exc:
            return _refusal(str(exc))
        except intake.Refused as exc:
            return _refusal(str(exc))
        except ConfigError as exc:
            return _refusal(f"the gateway's configuration does not load: {exc}")
        except DatabaseError as exc:
            return _refusal(f"the ledger cannot be reached now ({type(exc).__name__}); try again")

    async def list_resources(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourcesResult:
        caller = caller_of(ctx)
        runtime = RUNTIME.get()
        found = [types.Resource(name="skills", uri="ductile://skills", mime_type="text/markdown")]
        if caller.allows(("*",)):
            found.append(types.Resource(name="config", uri="ductile://config", mime_type="application/json"))
        if caller.allows(("plugin:ro",)):
            found += [
                types.Resource(name=f"pipeline {name}", uri=f"ductile://pipeline/{name}", mime_type="text/plain")
                for name, p in sorted(runtime.pipelines.pipelines.items())
                if not p.is_hook
            ]
        return types.ListResourcesResult(resources=found)

    async def list_templates(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="job",
                    uri_template="ductile://job/{job_id}",
                    mime_type="application/json",
                    description="A job and every job it led to (needs jobs:tree:ro).",
                ),
                types.ResourceTemplate(
                    name="pipeline",
                    uri_template="ductile://pipeline/{name}",
                    mime_type="text/plain",
                    description="A pipeline as a Mermaid flowchart (needs plugin:ro).",
                ),
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        caller = caller_of(ctx)
        uri = str(params.uri)
        try:
            text, mime = await _blocking(_resource, RUNTIME.get(), caller, uri)
        except ToolError as exc:
            raise MCPError(types.INVALID_PARAMS, RUNTIME.scrubber().text(str(exc))) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    return Server(
        "ductile",
        version=gateway_version(),
        title="Ductile gateway",
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        get_tool_input_schema=_input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscriptions_listen=ListenHandler(bus),
    )


def _input_schema(name: str) -> dict[str, Any] | None:
    """For the SDK's `Mcp-Param-*` header check: the schema is the tool's whoever calls."""
    tool = catalogue(RUNTIME.get()).tools.get(name)
    return tool.input_schema if tool is not None else None


def _checked(tool: Tool, arguments: dict[str, Any] | None) -> dict[str, Any]:
    given = calls.checked_arguments(arguments)
    calls.validated(tool, given)
    return given


def _checked_and_performed(runtime: Runtime, caller: Caller, tool: Tool, given: dict[str, Any] | None) -> Any:
    arguments = _checked(tool, given)
    action = tool.action
    if action[0] == "plugin":
        return calls.run_plugin(runtime, caller, action[1], action[2], arguments)
    if action[0] == "pipeline":
        return calls.run_pipeline(runtime, caller, action[1], arguments)
    verbs: dict[str, Callable[[], Any]] = {
        "job.inspect": lambda: calls.inspect(caller, arguments["job_id"]),
        "job.logs": lambda: calls.logs(caller, arguments),
        "event.publish": lambda: calls.publish(runtime, caller, arguments),
        "pipelines.dry_run": lambda: calls.dry_run(runtime, arguments),
        "pipelines.visualize": lambda: calls.visualize(runtime, arguments["name"]),
        "system.status": lambda: calls.status(runtime),
        "system.doctor": lambda: calls.doctor(runtime),
        "job.replay": lambda: calls.act_on_job(runtime, caller, action[0], arguments["job_id"]),
        "job.cancel": lambda: calls.act_on_job(runtime, caller, action[0], arguments["job_id"]),
        "job.retry": lambda: calls.act_on_job(runtime, caller, action[0], arguments["job_id"]),
    }
    return verbs[action[0]]()


async def _wait(
    ctx: ServerRequestContext[Any, Any], caller: Caller, runtime: Runtime, arguments: dict[str, Any]
) -> Any:
    """The tree under the job, once finished or at the timeout; progress (finished jobs of the
    tree so far) every PROGRESS_SECONDS meanwhile."""
    job = await _blocking(calls.job_named, arguments["job_id"])
    timeout = float(arguments.get("timeout_secs") or DEFAULT_WAIT_SECONDS)
    if runtime.config.api.max_sync_timeout:
        timeout = min(timeout, runtime.config.api.max_sync_timeout)
    deadline = time.monotonic() + timeout
    waiter = TreeWaiter()
    await _blocking(waiter.__enter__)
    try:
        while True:
            remaining = max(deadline - time.monotonic(), 0.0)
            outcome = await _blocking(partial(waiter.wait, [job.id], min(remaining, PROGRESS_SECONDS)))
            if outcome.complete or remaining <= PROGRESS_SECONDS:
                break
            done = sum(1 for j in outcome.jobs if j.is_terminal)
            await ctx.session.report_progress(done, len(outcome.jobs), f"{done} of {len(outcome.jobs)} jobs finished")
    finally:
        await _blocking(waiter.__exit__, None, None, None)
    report = outcome.report()
    report["tree"] = [caller.shaped(hop) for hop in report["tree"]]
    return caller.shaped({**report, "complete": outcome.complete})


def _resource(runtime: Runtime, caller: Caller, uri: str) -> tuple[str, str]:
    kind, _, rest = uri.removeprefix("ductile://").partition("/")
    needs = {"skills": None, "config": ("*",), "pipeline": ("plugin:ro",), "job": ("jobs:tree:ro",)}
    if not uri.startswith("ductile://") or kind not in needs or bool(rest) != (kind in ("pipeline", "job")):
        raise ToolError(
            f"no resource {uri!r}: ductile://skills, ductile://config, ductile://job/ID, ductile://pipeline/NAME"
        )
    scopes = needs[kind]
    if not caller.allows(scopes):
        raise ToolError(f"token lacks scope: {uri} needs one of {', '.join(scopes or ())}")
    if kind == "skills":
        return calls.skills_document(runtime), "text/markdown"
    if kind == "config":
        return json.dumps(RUNTIME.scrubber().json(calls.config(runtime))), "application/json"
    if kind == "pipeline":
        return calls.visualize(runtime, rest)["mermaid"], "text/plain"
    tree = calls.tree(caller, calls.job_named(rest))
    return json.dumps(RUNTIME.scrubber().json(tree), default=str), "application/json"


async def _watch_reloads(
    bus: InMemorySubscriptionBus, refresh: Callable[[], None] | None, standing: set[ServerSession]
) -> None:
    """Publish the list changes a reload made (the module docstring)."""
    seen: Any = None
    while True:
        try:
            if refresh is not None:
                await anyio.to_thread.run_sync(refresh)
            now = await anyio.to_thread.run_sync(_listing_of, RUNTIME.get())
        except ConfigError:
            now = seen  # no config loads: the last one serves on, nothing changed for a client
        except Exception:
            log.exception("the MCP server could not look for a reload; it looks again")
            now = seen
        if seen is not None and now != seen:
            log.info("the tools changed with a reload: told to %s", "every listening client")
            await bus.publish(ToolsListChanged())
            await bus.publish(ResourcesListChanged())
            for session in list(standing):
                try:
                    await session.send_tool_list_changed()
                    await session.send_resource_list_changed()
                except Exception:
                    standing.discard(session)  # the client went away
        seen = now
        await anyio.sleep(RELOAD_CHECK_SECONDS)


def _listing_of(runtime: Runtime) -> tuple[str, frozenset[tuple[str, frozenset[str]]], frozenset[str]]:
    """What a client's lists depend on: the tools, the tokens' scopes (which tools each sees) and
    the pipelines (resources)."""
    tokens = frozenset((t.name, t.scopes) for t in runtime.tokens.tokens)
    return catalogue(runtime).fingerprint, tokens, frozenset(runtime.pipelines.pipelines)
