"""Benchmark (issue 33): the API under slow and idle clients and open event streams.

    .venv/bin/python tests/bench/bench_hostile.py [--duration 30] [--slow 500] [--streams 200]
        [--probe-rate 40] [--gthread] [--out FILE]

Target: with 500 slow-header connections and 200 open `/events` subscribers, `/healthz` and a job
POST answer with p99 <= 100 ms.

The API runs as `system start` runs it (gunicorn with ductile_site/gunicorn.py: two processes of
16 threads and the front door, gateway/http/frontdoor.py), beside `runworkers` running the jobs the
probes POST, on a fresh SQLite ledger; so the streams carry the events of those jobs. A second
process (this file with `--role crowd`) holds the crowd, on asyncio: `--slow` connections that
each send a request head one byte every 5 s (the slowloris pattern; each is opened again when the
server closes it, so the count holds), and `--streams` subscribers of `/events`, spread over four
tokens (`api.max_streams_per_token` is 64), each reading what it is sent. Once the crowd is in
place, this process probes on an open-loop schedule at `--probe-rate` per second, alternating
`GET /healthz` and `POST /plugin/echo/poll`, each on a new connection (as a monitor and a fresh
client do), for `--duration` s; the latency of each is taken from its scheduled start.

`--gthread`: the same against gunicorn's plain threaded worker (`--worker-class gthread`), the
server before issue 33, for comparison (its probes time out: the report counts them).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import (
    NOP_SCRIPT,
    PYTHON,
    BenchConfig,
    emit,
    helper,
    machine,
    percentile,
    start_workers,
    stop_process,
    temp_dir,
    tree_cpu_seconds,
    wait_until,
)
from bench_api import TOKEN, free_port, healthy, start_api

STREAM_TOKENS = [f"stream-{n}" for n in range(4)]
TIMEOUT = 5.0  # a probe not answered within this counts as failed


def crowd(port: int, slow: int, streams: int, seconds: float) -> None:
    """The crowd's process: hold `slow` trickling connections and `streams` subscribers for
    `seconds`; then print what they saw as one JSON line."""
    seen: dict[str, Any] = {"slow_reopened": 0, "streams_open": 0, "streams_refused": 0, "stream_bytes": 0}

    async def trickler() -> None:
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1000
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                for byte in head:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(5)
            except (OSError, ConnectionError):
                pass
            seen["slow_reopened"] += 1
            await asyncio.sleep(0.1)

    async def subscriber(token: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        status = await reader.readline()
        if b" 200 " not in status:
            seen["streams_refused"] += 1
            return
        seen["streams_open"] += 1
        while data := await reader.read(65536):
            seen["stream_bytes"] += len(data)

    async def main() -> None:
        tasks = [asyncio.create_task(trickler()) for _ in range(slow)]
        for n in range(streams):
            tasks.append(asyncio.create_task(subscriber(STREAM_TOKENS[n % len(STREAM_TOKENS)])))
        await asyncio.sleep(3)
        print(json.dumps({"ready": True, **seen}), flush=True)
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        print(json.dumps(seen), flush=True)

    asyncio.run(main())


def probe(port: int, n: int) -> tuple[str, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        if n % 2:
            conn.request("GET", "/healthz")
            kind = "healthz"
        else:
            body = json.dumps({"payload": {"message": "probe"}})
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            conn.request("POST", "/plugin/echo/poll", body=body, headers=headers)
            kind = "post"
        response = conn.getresponse()
        response.read()
        return kind, response.status
    finally:
        conn.close()


def probes(port: int, rate: float, seconds: float) -> dict[str, Any]:
    """Open loop: probe n starts at start + n / rate on its own thread, whatever the others do."""
    results: list[tuple[str, int, float]] = []
    lock = threading.Lock()
    start = time.monotonic() + 0.1
    threads = []

    def one(n: int, due: float) -> None:
        try:
            kind, status = probe(port, n)
        except OSError:
            kind, status = ("healthz" if n % 2 else "post"), 0
        with lock:
            results.append((kind, status, time.monotonic() - due))

    for n in range(int(rate * seconds)):
        due = start + n / rate
        time.sleep(max(due - time.monotonic(), 0))
        thread = threading.Thread(target=one, args=(n, due))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    report: dict[str, Any] = {}
    for kind in ("healthz", "post"):
        mine = [r for r in results if r[0] == kind]
        ok = [1000 * r[2] for r in mine if r[1] in (200, 202)]
        report[kind] = {
            "probes": len(mine),
            "answered": len(ok),
            "failed": len(mine) - len(ok),
            "p50_ms": round(percentile(ok, 50), 2) if ok else None,
            "p99_ms": round(percentile(ok, 99), 2) if ok else None,
            "max_ms": round(max(ok), 2) if ok else None,
        }
    return report


def run(args: argparse.Namespace) -> dict[str, Any]:
    with temp_dir("hostile") as base:
        port = free_port()
        bind = f"127.0.0.1:{port}"
        tokens = [{"name": "bench", "token": TOKEN, "scopes": ["plugin:ro", "jobs:ro"]}]
        tokens += [{"name": name, "token": name, "scopes": ["events:ro"]} for name in STREAM_TOKENS]
        config = BenchConfig(base, {"echo": NOP_SCRIPT}, extra={"api": {"listen": bind, "auth": {"tokens": tokens}}})
        helper(config, "enqueue", "0", "echo")  # migrate the fresh ledger before anything starts
        env = config.env()
        if args.gthread:
            env["GUNICORN_CMD_ARGS"] = "--worker-class gthread"
        api = start_api(config, bind, base / "gunicorn.log", env)
        workers = None
        crowd_proc = None
        try:
            wait_until(lambda: healthy(f"http://{bind}"), timeout=60, what="the API's /healthz")
            workers = start_workers(config, base / "runworkers.log")
            argv = [PYTHON, __file__, "--role", "crowd", "--port", str(port), "--slow", str(args.slow)]
            argv += ["--streams", str(args.streams), "--duration", str(args.duration + 10)]
            crowd_proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=base)
            assert crowd_proc.stdout is not None
            ready = json.loads(crowd_proc.stdout.readline())
            cpu_before = tree_cpu_seconds(api.pid)
            report = probes(port, args.probe_rate, args.duration)
            api_cpu = tree_cpu_seconds(api.pid) - cpu_before
            crowd_proc.wait(timeout=60)
            seen = json.loads(crowd_proc.stdout.readline())
        finally:
            if crowd_proc is not None and crowd_proc.poll() is None:
                crowd_proc.kill()
            if workers is not None:
                stop_process(workers)
            stop_process(api)
        met = all(
            report[kind]["failed"] == 0 and (report[kind]["p99_ms"] or 1e9) <= 100 for kind in ("healthz", "post")
        )
        return {
            "benchmark": "hostile",
            "machine": machine(),
            "settings": {k: getattr(args, k) for k in ("duration", "slow", "streams", "probe_rate", "gthread")},
            "crowd_at_start": ready,
            "crowd": seen,
            "probes": report,
            "api_cpu_percent": round(100 * api_cpu / args.duration, 1),
            "target": {"p99_le_100ms_no_failures": met},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--slow", type=int, default=500)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--probe-rate", type=float, default=40)
    parser.add_argument("--gthread", action="store_true", help="gunicorn's plain gthread worker, for comparison")
    parser.add_argument("--out")
    parser.add_argument("--role", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "crowd":
        crowd(args.port, args.slow, args.streams, args.duration)
        return
    emit(run(args), args.out)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
