"""Fixed-rate HTTP load client for bench_api.py (a separate process; standard library only).

    python tests/bench/_api_client.py URL TOKEN --rate R --connections N --duration S --ids FILE

N keep-alive HTTP/1.1 connections (raw asyncio streams) share one open-loop schedule: request k
is due at start + k / R and goes out on connection k mod N, whether or not earlier answers have
come back. Latency is measured from the request's *due* time to its last body byte, so a server
stall counts in full for every request it held up (no "coordinated omission"): a connection still
waiting for its previous answer sends late, and the lateness is part of the latency. Also kept:
from the actual send (`service`).

Prints one JSON line: counts, statuses, errors, latency percentiles (nearest rank), the achieved
rate, and this process's own CPU time; writes the `job_id` of every 202 to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from urllib.parse import urlsplit

TIMEOUT = 5.0


def percentile(ordered: list[float], pct: float) -> float:
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    ms = {p: percentile(ordered, p) * 1000 for p in (50, 90, 99, 99.9)}
    return {
        "p50": round(ms[50], 2),
        "p90": round(ms[90], 2),
        "p99": round(ms[99], 2),
        "p99_9": round(ms[99.9], 2),
        "max": round(ordered[-1] * 1000, 2),
        "mean": round(sum(ordered) / len(ordered) * 1000, 2),
    }


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, body, headers.get("connection", "").lower() == "close"


class Load:
    def __init__(self, url: str, token: str, rate: float, connections: int, duration: float):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        body = b'{"payload": {"message": "bench"}}'
        self.request = (
            f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.rate, self.connections, self.duration = rate, connections, duration
        self.latency: list[float] = []
        self.service: list[float] = []
        self.statuses: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.ids: list[str] = []
        self.late_sends = 0

    async def connection(self, index: int, start: float) -> None:
        loop = asyncio.get_running_loop()
        stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        k = index
        while True:
            due = start + k / self.rate
            if due >= start + self.duration:
                break
            k += self.connections
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            elif wait < -0.001:
                self.late_sends += 1
            try:
                if stream is None:
                    stream = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), TIMEOUT)
                reader, writer = stream
                sent = loop.time()
                writer.write(self.request)
                status, body, close = await asyncio.wait_for(read_response(reader), TIMEOUT)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as exc:
                name = type(exc).__name__
                self.errors[name] = self.errors.get(name, 0) + 1
                if stream is not None:
                    stream[1].close()
                stream = None
                continue
            finished = loop.time()
            self.latency.append(finished - due)
            self.service.append(finished - sent)
            self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
            if status == 202:
                self.ids.append(json.loads(body)["job_id"])
            if close:
                writer.close()
                stream = None
        if stream is not None:
            stream[1].close()

    async def run(self) -> float:
        start = asyncio.get_running_loop().time() + 0.2  # every connection scheduled before the first is due
        await asyncio.gather(*(self.connection(i, start) for i in range(self.connections)))
        return asyncio.get_running_loop().time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--ids", required=True)
    args = parser.parse_args()
    load = Load(args.url, args.token, args.rate, args.connections, args.duration)
    cpu_before = time.process_time()
    seconds = asyncio.run(load.run())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(args.ids, "w") as handle:
        handle.write("\n".join(load.ids))
    answered = len(load.latency)
    print(
        json.dumps(
            {
                "requests": answered,
                "seconds": round(seconds, 3),
                "requests_per_s": round(answered / seconds, 1),
                "rate": args.rate,
                "latency_ms": spread(load.latency),
                "service_ms": spread(load.service),
                "statuses": load.statuses,
                "errors": load.errors,
                "late_sends": load.late_sends,
                "client_cpu_s": round(time.process_time() - cpu_before, 2),
                "client_max_rss_mb": round(usage.ru_maxrss / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
