"""Benchmark: MCP over the API's /mcp (issue 40), driven by the official SDK's client.

    .venv/bin/python tests/bench/bench_mcp.py [--rate 50] [--duration 20] [--plugins 100]
        [--lists 50] [--backlog N] [--out FILE]

Targets (issue 40): a tool call that enqueues answers with p99 <= 50 ms under 50 calls/s while
workers drain; `tools/list` with 100 plugins configured <= 100 ms.

Setup: a fresh config directory and SQLite ledger with `--plugins` plugins (each the minimal
`/bin/sh` plugin of the other benchmarks, with a read `poll` and a write `handle`: two tools
each) and one `*` token; the API started as `system start` starts it (bench_api.start_api,
gunicorn with the product's config, two processes), and `runworkers` (2 threads) draining a
backlog of `--backlog` jobs queued before it starts (default: more than it can run before the
load ends), so the workers run flat out throughout, as in bench_api's `drain`.

Phases, one client process (this one), the SDK's `Client` on the 2026-07-28 protocol (one POST
per request; its response cache off):
1. `tools_list`: `--lists` `tools/list` calls one after another (after 3 to warm up); each's wall
   time as the client sees it (HTTP, the server, the client's parse of every tool): p50/p99/max,
   and the number of tools listed.
2. `enqueue`: `plugin.p000.handle` called at `--rate` per second on an open-loop schedule (each
   call a task started at its time, whatever the others are doing) for `--duration` s; latency
   from the call's scheduled time to its answer: p50/p90/p99/max; the API processes' CPU per
   call; errors; every returned job id checked against `job_queue` afterwards.
3. `api_enqueue_same_run`: the same at the same rate through the REST API
   (`POST /plugin/p000/handle`, httpx2): what the machine gives the API's own path at that moment,
   so that a shared machine's slow minute reads as such and MCP's own cost as the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httpx2
from _common import (
    NOP_SCRIPT,
    BenchConfig,
    emit,
    helper,
    machine,
    percentile,
    sqlite_query,
    start_workers,
    stop_process,
    temp_dir,
    tree_cpu_seconds,
    wait_until,
)
from bench_api import free_port, healthy, start_api
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TOKEN = "bench-token"
COMMANDS = [{"name": "poll", "type": "read"}, {"name": "handle", "type": "write"}]


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(percentile(ordered, 50), 2),
        "p90": round(percentile(ordered, 90), 2),
        "p99": round(percentile(ordered, 99), 2),
        "max": round(ordered[-1], 2) if ordered else 0.0,
    }


async def measure(url: str, args: argparse.Namespace, api_pid: int) -> dict[str, Any]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), cache=None) as client:
        for _ in range(3):
            await client.list_tools()
        lists = []
        for _ in range(args.lists):
            start = time.perf_counter()
            listed = await client.list_tools()
            lists.append((time.perf_counter() - start) * 1000)
        mcp_phase = await open_loop(args, lambda: mcp_call(client), api_pid)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    async with http:
        api_phase = await open_loop(args, lambda: api_call(http, url.removesuffix("/mcp")), api_pid)
    return {
        "tools_list": {"tools": len(listed.tools), "latency_ms": spread(lists), "target_ms": 100},
        "enqueue": {**mcp_phase, "target_p99_ms": 50},
        "api_enqueue_same_run": api_phase,
    }


async def mcp_call(client: Client) -> str:
    result = await client.call_tool("plugin.p000.handle", {"n": 1})
    text = result.content[0].text  # type: ignore[union-attr]
    if result.is_error:
        raise RuntimeError(text)
    return str(json.loads(text)["job_id"])


async def api_call(http: httpx2.AsyncClient, base: str) -> str:
    reply = await http.post(f"{base}/plugin/p000/handle", json={"payload": {"n": 1}})
    if reply.status_code != 202:
        raise RuntimeError(f"{reply.status_code} {reply.text}")
    return str(reply.json()["job_id"])


async def open_loop(args: argparse.Namespace, call: Any, api_pid: int) -> dict[str, Any]:
    """`call` at `--rate` per second for `--duration` s, each started at its time (open loop)."""
    latencies: list[float] = []
    errors: list[str] = []
    ids: list[str] = []

    async def one(due: float) -> None:
        try:
            ids.append(await call())
        except Exception as exc:
            errors.append(repr(exc))
        latencies.append((time.perf_counter() - due) * 1000)

    await call()  # warm-up
    tasks = []
    cpu, own = tree_cpu_seconds(api_pid), time.process_time()
    start = time.perf_counter()
    for index in range(int(args.rate * args.duration)):
        due = start + index / args.rate
        await asyncio.sleep(max(due - time.perf_counter(), 0))
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    return {
        "offered_per_s": args.rate,
        "answered_per_s": round(len(latencies) / elapsed, 1),
        "latency_ms": spread(latencies),
        "api_cpu_ms_per_call": round((tree_cpu_seconds(api_pid) - cpu) * 1000 / max(len(latencies), 1), 2),
        # This client's own CPU per call: it shares the cores with the server.
        "client_cpu_ms_per_call": round((time.process_time() - own) * 1000 / max(len(latencies), 1), 2),
        "errors": len(errors),
        "first_errors": errors[:3],
        "ids": ids,
        "loadavg_1m_after": os.getloadavg()[0],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with temp_dir("mcp") as base:
        bind = f"127.0.0.1:{free_port()}"
        plugins = {f"p{i:03d}": NOP_SCRIPT for i in range(args.plugins)}
        config = BenchConfig(
            base,
            {**plugins, "nop": NOP_SCRIPT},
            commands=COMMANDS,
            extra={"api": {"listen": bind, "auth": {"tokens": [{"name": "bench", "token": TOKEN, "scopes": ["*"]}]}}},
        )
        helper(config, "enqueue", "0", "nop")  # migrate the fresh ledger before anything starts
        backlog = args.backlog or int(400 * (2 * args.duration + 30))
        helper(config, "enqueue", str(backlog), "nop", timeout=600)
        api = start_api(config, bind, base / "gunicorn.log", config.env())
        workers = None
        try:
            wait_until(lambda: healthy(f"http://{bind}"), timeout=60, what="the API's /healthz")
            workers = start_workers(config, base / "workers.log", "--threads", "2")
            time.sleep(2)  # the workers are draining
            found = asyncio.run(measure(f"http://{bind}/mcp", args, api.pid))
            drained = sqlite_query(
                config.db_path, "SELECT count(*) FROM job_queue WHERE plugin='nop' AND status='succeeded'"
            )
        finally:
            if workers is not None:
                stop_process(workers)
            stop_process(api)
        rows = {r[0] for r in sqlite_query(config.db_path, "SELECT id FROM job_queue WHERE plugin='p000'")}
        for phase in ("enqueue", "api_enqueue_same_run"):
            found[phase]["job_ids_missing"] = len(set(found[phase].pop("ids")) - rows)
        done = drained[0][0]
        found["workers"] = {"backlog": backlog, "succeeded_during_run": done, "still_draining": done < backlog}
        found["target_met"] = (
            found["tools_list"]["latency_ms"]["p99"] <= 100
            and found["enqueue"]["latency_ms"]["p99"] <= 50
            and found["enqueue"]["errors"] == 0
            and found["enqueue"]["job_ids_missing"] == 0
        )
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--plugins", type=int, default=100)
    parser.add_argument("--lists", type=int, default=50)
    parser.add_argument("--backlog", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()
    result = run(args)
    emit({"benchmark": "mcp", "machine": machine(), "settings": vars(args), **result}, args.out)


if __name__ == "__main__":
    main()
