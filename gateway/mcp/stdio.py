"""`ductile mcp`: the MCP server over this process's stdin and stdout, for a local client (Claude
Desktop or Code, Cursor) that starts it as a command.

Who it serves. With a token (`--token` or DUCTILE_MCP_TOKEN) the client sees and calls what that
API token's scopes allow, as over HTTP; the token is checked again at every call against the
runtime served now, so a token deleted or narrowed by a reload stops working here too. Without
one it has the local CLI's access, every tool: whoever can run `ductile mcp` on this machine can
run `ductile job retry` and read the ledger's file too, so a token would guard nothing the
operating system does not already guard (docs/mcp.md).

Which runtime. While `system start` runs on this config, the snapshot it serves (what every
gateway process runs on), taken again whenever it rewrites it after a reload; else the config as
read here at the start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from mcp.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

from gateway.daemon.control import served_runtime, snapshot_file_for
from gateway.mcp.calls import ToolError
from gateway.mcp.catalogue import Caller
from gateway.mcp.server import build_server
from gateway.runtime import RUNTIME

TOKEN_ENV = "DUCTILE_MCP_TOKEN"


class InvalidToken(Exception):
    """The token given is none of the API's."""


def local_caller(secret: str | None) -> Caller:
    """The caller `secret` names now; None: the local user (module docstring)."""
    if secret is None:
        return Caller(None)
    token = RUNTIME.get().tokens.authenticate(secret)
    if token is None:
        raise InvalidToken
    return Caller(token)


class SnapshotFollower:
    """Takes the runtime `system start` serves whenever its snapshot file changes."""

    def __init__(self) -> None:
        self.seen: tuple[int, int] | None = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            found = Path(snapshot_file_for(RUNTIME.get().config)).stat()
        except OSError:
            return None
        return found.st_mtime_ns, found.st_ino

    def __call__(self) -> None:
        stamp = self._stamp()
        if stamp is None or stamp == self.seen:
            return
        self.seen = stamp
        current = RUNTIME.get()
        served = served_runtime(current)
        if served is not current:
            RUNTIME.install(served)


def serve(secret: str | None) -> None:
    """Serve until the client closes stdin. `secret` was checked by the caller (`local_caller`)."""
    served = served_runtime(RUNTIME.get())
    if served is not RUNTIME.get():
        RUNTIME.install(served)

    def caller_of(ctx: Any) -> Caller:
        try:
            return local_caller(secret)
        except InvalidToken:
            raise ToolError("the token `ductile mcp` was given is no longer valid (a reload removed it?)") from None

    server = build_server(caller_of, refresh=SnapshotFollower())
    anyio.run(_run, server)


async def _run(server: Server[Any]) -> None:
    options = server.create_initialization_options(NotificationOptions(tools_changed=True, resources_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


def token_from(flag: str | None) -> str | None:
    return flag or os.environ.get(TOKEN_ENV) or None
