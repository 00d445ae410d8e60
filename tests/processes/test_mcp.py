"""MCP (issue 40), driven by the official SDK's own client over both transports against a real
`system start`: Streamable HTTP at the API's /mcp with a bearer token, and `ductile mcp` over
stdio with one. Each transport: the tools each token sees, a plugin command called and its job in
the ledger (submitted by `mcp:<token>`), a pipeline run and waited for with progress, a write a
read-only token is refused, hostile arguments answered as tool errors (and the server still
answering after them), and a reload that adds a tool, announced on a listen stream."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import TextResourceContents

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.live_api import LiveApi, live_api
from tests.support.processes import cli_env, ductile, ledger

pytestmark = [pytest.mark.process, pytest.mark.postgres]

TOKENS = [
    {"name": "admin", "token": "tok-admin", "scopes": ["*"]},
    {"name": "reader", "token": "tok-reader", "scopes": ["jobs:ro"]},
    {"name": "echoer", "token": "tok-echoer", "scopes": ["echo:rw", "jobs:ro"]},
]
PIPELINES = [
    {
        "name": "slow-pair",
        "on": "pair.start",
        "steps": [{"id": "nap", "uses": "stress", "with": {"sleep": 2.5}}, {"id": "say", "uses": "echo.handle"}],
    }
]


@asynccontextmanager
async def connect(transport: str, live: LiveApi, cfg: ConfigDir, token: str) -> AsyncIterator[Client]:
    if transport == "http":
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        async with http, Client(streamable_http_client(f"{live.api.base}/mcp", http_client=http)) as client:
            yield client
    else:
        command = StdioServerParameters(
            command=sys.executable,
            args=[str(REPO / "manage.py"), "mcp", "--config-dir", str(cfg.path)],
            env=cli_env(cfg, DUCTILE_MCP_TOKEN=token),
            cwd=str(REPO),
        )
        async with Client(command, read_timeout_seconds=60) as client:
            yield client


def names(listing: Any) -> set[str]:
    return {tool.name for tool in listing.tools}


def answer(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def text_of(client: Client, uri: str) -> str:
    contents = (await client.read_resource(uri)).contents[0]
    assert isinstance(contents, TextResourceContents), contents
    return contents.text


def refusal(result: Any) -> str:
    assert result.is_error, result.content
    return result.content[0].text


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.fixture
def gateway(process_db: ConfigDir):
    process_db.extra["pipelines"] = PIPELINES
    with live_api(process_db, TOKENS, workers=True) as live:
        yield live, process_db


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_an_mcp_client_drives_the_gateway_within_its_token(gateway, transport):
    live, cfg = gateway
    anyio.run(drive, transport, live, cfg)
    if transport == "stdio":  # a token that is none of the API's is refused at the start
        unknown = ductile(cfg, "mcp", "--token", "tok-unknown", input="")
        assert unknown.returncode == 2 and "none of the API's tokens" in unknown.stderr, unknown.stderr
    # Nesting deeper than the SDK's client serializes (~250), as raw JSON-RPC: the SDK's parser
    # refuses it before the gateway sees it (over HTTP a parse error, -32700, with a 400; over stdio
    # the line is dropped unanswered), and the server answers the next request.
    deep, deeper = (tools_call("plugin.echo.handle", '{"deep": ' + nested_text(n) + "}", n) for n in (300, 100_000))
    answers = raw_exchange(transport, live, cfg, [deep, deeper, tools_call("system.status", "{}", 1)])
    refused = {r["id"]: r["error"]["code"] for r in answers if "error" in r} if transport == "http" else {}
    assert refused == ({None: -32700} if transport == "http" else {}), answers
    assert json.loads(answers[-1]["result"]["content"][0]["text"])["status"] == "ok", answers


async def drive(transport: str, live: LiveApi, cfg: ConfigDir) -> None:
    # Tools per scope: jobs:ro reads, echo:rw adds echo's commands and nothing of stress's.
    async with connect(transport, live, cfg, "tok-reader") as reader:
        seen = names(await reader.list_tools())
        assert {"job.inspect", "job.logs", "job.wait", "system.status"} <= seen
        assert not {t for t in seen if t.startswith(("plugin.", "pipeline."))}
        assert not {"job.retry", "job.cancel", "job.replay", "system.doctor", "event.publish"} & seen
        refused = refusal(await reader.call_tool("plugin.echo.poll", {"message": "no"}))
        assert "lacks scope" in refused and "echo:rw" in refused
    async with connect(transport, live, cfg, "tok-echoer") as echoer:
        seen = names(await echoer.list_tools())
        assert {"plugin.echo.poll", "plugin.echo.handle", "plugin.echo.health"} <= seen
        assert not {t for t in seen if t.startswith(("plugin.stress.", "pipeline."))}
        tool = next(t for t in (await echoer.list_tools()).tools if t.name == "plugin.echo.health")
        hints = tool.annotations
        assert hints is not None and hints.read_only_hint is True and hints.destructive_hint is False
        queued = answer(await echoer.call_tool("plugin.echo.poll", {"message": f"from {transport}"}))
        done = answer(await echoer.call_tool("job.wait", {"job_id": queued["job_id"], "timeout_secs": 30}))
        assert done["complete"] and done["status"] == "succeeded", done
    rows = {row["id"]: row for row in ledger(cfg)}
    assert rows[queued["job_id"]]["status"] == "succeeded"
    # The refused call enqueued nothing: this is the one echo.poll of the ledger.
    assert [r["id"] for r in rows.values() if (r["plugin"], r["command"]) == ("echo", "poll")] == [queued["job_id"]]
    code, job = live.api.call("GET", f"/job/{queued['job_id']}")
    assert code == 200 and job["submitted_by"] == "mcp:echoer", job

    async with connect(transport, live, cfg, "tok-admin") as admin:
        # A pipeline, answered at once with its root, then waited for with progress.
        started = answer(await admin.call_tool("pipeline.slow-pair", {"note": "hi"}))
        reported: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            reported.append((progress, total))

        waited = await admin.call_tool(
            "job.wait", {"job_id": started["job_id"], "timeout_secs": 60}, progress_callback=on_progress
        )
        tree = answer(waited)
        assert tree["complete"] and tree["status"] == "succeeded", tree
        assert [hop["plugin"] for hop in tree["tree"]] == ["stress", "echo"]
        assert reported and all(total and done < total for done, total in reported), reported

        # Hostile arguments: tool errors, never a dropped connection; the server answers after.
        assert "input schema" in refusal(await admin.call_tool("plugin.echo.poll", {"message": 5}))
        assert "no job" in refusal(await admin.call_tool("job.inspect", {"job_id": "x" * 64}))
        assert "bytes" in refusal(await admin.call_tool("plugin.echo.handle", {"text": "x" * (1024 * 1024 + 10)}))
        assert "no tool" in refusal(await admin.call_tool("plugin.nope.poll", {}))
        assert answer(await admin.call_tool("system.status", {}))["status"] == "ok"

        # Resources: the skills document, a job's tree, a pipeline's chart.
        assert "plugin.echo.poll" in await text_of(admin, "ductile://skills")
        assert (await text_of(admin, "ductile://pipeline/slow-pair")).startswith("flowchart")
        job_tree = json.loads(await text_of(admin, f"ductile://job/{started['job_id']}"))
        assert len(job_tree) == 2

        # A reload that adds a pipeline adds its tool, told on a listen stream.
        async with admin.listen(tools_list_changed=True) as events:
            cfg.extra["pipelines"] = [*PIPELINES, {"name": "added", "on": "added.start", "steps": [{"uses": "echo"}]}]
            cfg.write()
            reload = ductile(cfg, "system", "reload")
            assert reload.returncode == 0, reload.stderr
            with anyio.fail_after(30):
                async for _ in events:
                    break
        assert "pipeline.added" in names(await admin.list_tools())


def nested_text(depth: int) -> str:
    """`nested(depth)` as JSON, written out (json.dumps recurses, and stops near 1,000)."""
    return '{"a": ' * depth + '"leaf"' + "}" * depth


def tools_call(name: str, arguments: str, request_id: int) -> str:
    """A `tools/call` request whose arguments are the JSON text `arguments`."""
    head = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name}})
    return head[: -len("}}")] + f', "arguments": {arguments}}}}}'


def raw_exchange(transport: str, live: LiveApi, cfg: ConfigDir, bodies: list[str]) -> list[dict[str, Any]]:
    """Each body sent as it is, by a handshake-era client (no SDK to refuse what it cannot
    serialize), and the answers: an HTTP POST each, or lines on `ductile mcp`'s stdin and stdout."""
    if transport == "http":
        headers = {
            "Authorization": "Bearer tok-admin",
            "MCP-Protocol-Version": "2025-06-18",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        found = []
        for body in bodies:
            reply = httpx2.post(f"{live.api.base}/mcp", content=body, headers=headers, timeout=60)
            assert reply.status_code < 500, reply.text
            text = reply.text
            if reply.headers["content-type"].startswith("text/event-stream"):
                text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
            found.append(json.loads(text))
        return found
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "mcp", "--config-dir", str(cfg.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=cli_env(cfg, DUCTILE_MCP_TOKEN="tok-admin"),
        cwd=REPO,
    )
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None
    try:

        def send(message: str) -> None:
            stdin.write(message + "\n")
            stdin.flush()

        send(json.dumps(hello))
        stdout.readline()
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for body in bodies:
            send(body)
        # Lines the SDK cannot parse are dropped unanswered: read up to the last request's answer.
        last = json.loads(bodies[-1])["id"]
        lines: list[dict[str, Any]] = []
        while not lines or lines[-1].get("id") != last:
            lines.append(json.loads(stdout.readline()))
        return lines
    finally:
        stdin.close()
        proc.wait(timeout=30)


def test_a_listen_stream_takes_a_seat_of_the_stream_caps(process_db):
    """One stream per token: a second listen stream of the same token is refused (429), and a
    stream that ended gives its seat back."""
    settings = {"max_streams_per_token": 1}
    with live_api(process_db, TOKENS, settings=settings) as live:
        anyio.run(listen_twice, live, process_db)


async def listen_twice(live: LiveApi, cfg: ConfigDir) -> None:
    async with connect("http", live, cfg, "tok-admin") as admin:
        async with admin.listen(tools_list_changed=True):
            with pytest.raises(MCPError, match=r"already has 1 open streams"):
                async with admin.listen(tools_list_changed=True):
                    pass
        for _ in range(50):  # the ended stream's seat comes back
            try:
                async with admin.listen(tools_list_changed=True):
                    return
            except MCPError:
                await anyio.sleep(0.1)
        raise AssertionError("the seat of an ended listen stream was never given back")


def test_a_stopping_gateway_ends_its_listen_streams_at_once(process_db):
    """A listen stream holds a request thread; gunicorn's graceful stop waits for its requests (up
    to 30 s). The worker's stop ends the stream as it ends /events' (the client re-listens)."""
    with live_api(process_db, TOKENS) as live:
        took = anyio.run(stop_while_listening, live, process_db)
    assert took < 10, f"the listen stream ended {took:.1f} s after SIGTERM"


async def stop_while_listening(live: LiveApi, cfg: ConfigDir) -> float:
    async with connect("http", live, cfg, "tok-admin") as admin, admin.listen(tools_list_changed=True) as events:
        live.proc.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        with anyio.fail_after(40), contextlib.suppress(SubscriptionLost):
            async for _ in events:
                pass
        return time.monotonic() - asked
