"""Benchmark: `POST /plugin/echo/poll` from 50 concurrent clients against the API under gunicorn.

    .venv/bin/python tests/bench/bench_api.py [--runs 3] [--duration 30] [--connections 50]
        [--rate R] [--threads 1] [--variants queued,workers,drain] [--backlog N]
        [--skip-saturation] [--out FILE]
        [--gunicorn-config FILE] [--workers-nice N] [--profile]   (diagnostics)

Targets (issues 5 and 16): the API alone at 500 requests/s: p99 <= 25 ms, zero errors, every
accepted job in the queue. The API while workers drain on the same SQLite file, 300 requests/s
offered: all served, p99 <= 100 ms, zero errors, every job id in the ledger.

Each run of each variant gets a fresh config directory and SQLite ledger (WAL) and starts the API
exactly as `system start` does (`python -m gunicorn -c ductile_site/gunicorn.py --bind ADDR
ductile_site.wsgi:application`, the argv of gateway/daemon/supervisor.py), on 127.0.0.1. The
config has one plugin, `echo`, whose `poll` command is `read` (a minimal `/bin/sh` script, as in
the other benchmarks), and one API token scoped `plugin:ro`. Every request is
`POST /plugin/echo/poll` with `{"payload": {"message": "bench"}}` and the bearer token, on 50
kept-alive HTTP/1.1 connections (50 concurrent clients).

Variants:
- `queued`: nothing else runs; every accepted job stays `queued` (checked).
- `workers`: `manage.py runworkers` (2 threads) runs the jobs while the load is on; the workers'
  claims and completions compete with the API for SQLite's write lock and for the 2 CPUs.
- `drain` (issue 16): as `workers`, but `--backlog` jobs of a second plugin, `nop`, are queued
  before the workers start (default: more than they can run before the load ends), so the
  workers run flat out for the whole measurement, as after a burst or on a busy gateway.
  `workers.backlog_left` > 0 at the end says they were still draining. Offered: 300 requests/s.

The fixed-rate phase offers `--rate` requests/s; by default 500 (`queued`, `workers`) and 300
(`drain`), each variant's target.

Phases, on the same server, one after another:
1. warm-up, `--warmup` s (3): wrk, closed loop (Django's and the workers' lazy set-up).
2. `fixed_rate`, `--duration` s: 500 requests/s in all (`--rate`), spread over the 50
   connections on an open-loop schedule, by tests/bench/_api_client.py (Python, asyncio, raw
   sockets; its docstring says how it avoids coordinated omission). This phase answers the
   target's "p99 <= 25 ms at >= 500 requests/s". A closed loop cannot: 50 clients that each send
   again the moment they are answered keep 50 requests in the server, so by Little's law their
   mean latency is 50 / throughput, and 25 ms would take 2,000 requests/s before any tail.
3. `saturation`, `--duration` s: wrk (Debian package `wrk`, C), closed loop, 50 connections,
   each sending its next request as soon as the last is answered: the most the server answers
   per second, and the latency under that overload. wrk rather than Python here because client
   and server share the cores, and at full speed a C client leaves more of them to the server.

Numbers, per phase:
- `requests_per_s`: answers / the phase's measured duration.
- `latency_ms`: fixed_rate: from the request's scheduled send time to its last byte read
  (nearest-rank p50/p90/p99/p99.9, max, mean), and `service_ms` from the actual send;
  saturation: wrk's latency (request written -> answer read) from its histogram (µs resolution).
- `errors`: socket errors and timeouts (wrk --timeout 2 s; the client's 5 s) and non-2xx
  answers; `statuses`: every HTTP status seen. `late_sends`: fixed-rate requests sent more than
  1 ms after their scheduled time (their connection was still waiting for an answer).
- `loadavg_1m`: the 1-minute load average just before and just after the phase (the machine is
  shared; the load before says how busy it was before the phase added its own).
- `client_cpu_s`: the fixed-rate client's own CPU time (it shares the cores with the server).
- `api_cpu_ms_per_request`: fixed_rate: the CPU of the API's processes (gunicorn's master and
  workers) over the phase, per answer. Steadier than the latency on a machine whose speed moves:
  compare it with `client_cpu_s` of the same run, which moves with the machine too.
Per variant:
- `queue_check`, after the load stops, over all phases: `accepted` (202 answers),
  `job_ids_returned` (distinct), `job_ids_missing` (returned but not a `job_queue` row: must be
  0), `job_queue_rows` (rows of plugin `echo`; more than `accepted` by at most the requests in
  flight when a wrk phase stopped, whose answers wrk no longer reads: `in_flight_at_stop`, at most
  one per connection per wrk phase), `duplicate_ids` (0), and for `queued` `rows_not_queued` (0).
- `workers.succeeded_by_end`: jobs the workers finished by the end of the saturation phase.
- `target`: fixed_rate sustained >= 99 % of the offered rate and its p99 <= the variant's target
  (25 ms; 100 ms for `drain`); for `queued` and `workers` saturation >= 500/s; zero errors in
  every phase; the queue check passed. `target_met`: all of them.

`--skip-saturation` leaves out phase 3 (the quick smoke of run_all.py). `--profile` runs
gunicorn with tests/bench/_profile_gunicorn.py (the product's config plus the clocks of
_sections.py) and adds `api_profile` to each run: where the API's time went per request (the
write gate's thread lock and flock waits, BEGIN, COMMIT, the enqueue's SQL, the rest), for all
requests and for the slowest 1 %.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from _common import (
    BENCH,
    NOP_SCRIPT,
    PYTHON,
    REPO,
    BenchConfig,
    emit,
    helper,
    machine,
    sqlite_query,
    start_workers,
    stop_process,
    temp_dir,
    tree_cpu_seconds,
    wait_until,
)

TOKEN = "bench-token"
TARGET = {"requests_per_s": 500, "p99_ms": 25.0}
# Per variant: the offered rate of the fixed-rate phase and its p99 target (issue 16 for drain).
RATE = {"queued": 500.0, "workers": 500.0, "drain": 300.0}
P99_MS = {"queued": 25.0, "workers": 25.0, "drain": 100.0}

# Per-thread state: status counts and the job ids of 202s, collected by done() through thread:get.
WRK_SCRIPT = r"""
local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = "POST"
  wrk.body = '{"payload": {"message": "bench"}}'
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  ids_file = io.open(args[2] .. "/ids-" .. tid .. ".txt", "w")
  -- Line-buffered: nothing closes this file when wrk exits, and done() runs in another Lua state.
  ids_file:setvbuf("line")
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if status == 202 then
    local id = string.match(body, '"job_id"%s*:%s*"([^"]+)"')
    if id then
      ids_file:write(id, "\n")
    end
  end
end

function done(summary, latency, requests)
  local counts = {}
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for code, n in pairs(s) do
      counts[tostring(code)] = (counts[tostring(code)] or 0) + n
    end
  end
  local parts = {}
  for code, n in pairs(counts) do table.insert(parts, string.format('"%s": %d', code, n)) end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_us": {"p50": %d, "p90": %d, "p99": %d, "max": %d, "mean": %.1f}, "statuses": {%s}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    table.concat(parts, ", ")))
end
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


GUNICORN_CONFIG = REPO / "ductile_site" / "gunicorn.py"


def start_api(
    config: BenchConfig, bind: str, log_path: Path, env: dict[str, str], gunicorn_config: Path = GUNICORN_CONFIG
) -> subprocess.Popen[bytes]:
    """The API as `system start` runs it (gateway/daemon/supervisor.py, `gunicorn()` and `plan()`)."""
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process by stop_process
    argv = [PYTHON, "-m", "gunicorn", "-c", str(gunicorn_config), "--bind", bind]
    proc = subprocess.Popen(
        [*argv, "ductile_site.wsgi:application"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**env, "DUCTILE_CONFIG_DIR": str(config.path)},
        cwd=REPO,
        start_new_session=True,
    )
    proc._bench_log = log  # type: ignore[attr-defined]
    return proc


def healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def wrk(base: str, script: Path, ids_dir: Path, *, connections: int, threads: int, seconds: int) -> dict[str, Any]:
    ids_dir.mkdir()
    argv = [
        "wrk",
        f"--threads={threads}",
        f"--connections={connections}",
        f"--duration={seconds}s",
        "--timeout=2s",
        "--latency",
        f"--script={script}",
        base + "/plugin/echo/poll",
        "--",
        TOKEN,
        str(ids_dir),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WRK_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    result: dict[str, Any] = json.loads(line.removeprefix("WRK_JSON "))
    result["ids"] = [i for f in sorted(ids_dir.iterdir()) for i in f.read_text().split()]
    return result


def fixed_rate(url: str, ids_file: Path, *, rate: float, connections: int, seconds: int) -> dict[str, Any]:
    argv = [PYTHON, str(BENCH / "_api_client.py"), url + "/plugin/echo/poll", TOKEN]
    argv += ["--rate", str(rate), "--connections", str(connections), "--duration", str(seconds), "--ids", str(ids_file)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"load client failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["ids"] = ids_file.read_text().split()
    return result


def queue_check(
    config: BenchConfig, ids: list[str], accepted: int, in_flight_bound: int, variant: str
) -> dict[str, Any]:
    rows = dict(sqlite_query(config.db_path, "SELECT id, status FROM job_queue WHERE plugin = 'echo'"))
    returned = set(ids)
    missing = [i for i in returned if i not in rows]
    check = {
        "accepted": accepted,
        "job_ids_returned": len(returned),
        "job_ids_missing": len(missing),
        "job_queue_rows": len(rows),
        "in_flight_at_stop": len(rows) - len(returned),
        "duplicate_ids": len(ids) - len(returned),
    }
    if variant == "queued":
        check["rows_not_queued"] = sum(1 for s in rows.values() if s != "queued")
    check["ok"] = (
        not missing
        and len(returned) == accepted == len(ids)
        and 0 <= len(rows) - len(returned) <= in_flight_bound
        and not check.get("rows_not_queued")
    )
    return check


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def run_variant(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    with temp_dir("api") as base:
        port = free_port()
        bind = f"127.0.0.1:{port}"
        url = f"http://{bind}"
        config = BenchConfig(
            base,
            {"echo": NOP_SCRIPT, **({"nop": NOP_SCRIPT} if variant == "drain" else {})},
            extra={
                "api": {
                    "listen": bind,
                    "auth": {"tokens": [{"name": "bench", "token": TOKEN, "scopes": ["plugin:ro"]}]},
                }
            },
        )
        helper(config, "enqueue", "0", "echo")  # migrate the fresh ledger before anything starts
        backlog = 0
        if variant == "drain":
            backlog = args.backlog or int(700 * (args.warmup + args.duration * (1 if args.skip_saturation else 2) + 10))
            helper(config, "enqueue", str(backlog), "nop", timeout=600)
        script = base / "post.lua"
        script.write_text(WRK_SCRIPT)
        env = config.env()
        gunicorn_config = Path(args.gunicorn_config)
        if args.profile:
            gunicorn_config = BENCH / "_profile_gunicorn.py"
            env["BENCH_PROFILE_DIR"] = str(base)
        api = start_api(config, bind, base / "gunicorn.log", env, gunicorn_config)
        workers = None
        phases: dict[str, dict[str, Any]] = {}
        opts = {"connections": args.connections}
        try:
            wait_until(lambda: healthy(url), timeout=60, what="the API's /healthz")
            if variant in ("workers", "drain"):
                log_path = base / "runworkers.log"
                nice = ["nice", "-n", str(args.workers_nice), PYTHON] if args.workers_nice else None
                workers = start_workers(config, log_path, prefix=nice)
                wait_until(lambda: b"runworkers started" in log_path.read_bytes(), timeout=60, what="runworkers")
            phases["warmup"] = wrk(url, script, base / "ids-warmup", threads=args.threads, seconds=args.warmup, **opts)
            before = loadavg()
            rate = args.rate or RATE[variant]
            window_start = time.time_ns()
            cpu_before = tree_cpu_seconds(api.pid)
            phases["fixed_rate"] = fixed_rate(url, base / "ids-rate", rate=rate, seconds=args.duration, **opts)
            api_cpu = tree_cpu_seconds(api.pid) - cpu_before
            phases["fixed_rate"]["loadavg_1m"] = {"before": before, "after": loadavg()}
            phases["fixed_rate"]["api_cpu_ms_per_request"] = round(
                1000 * api_cpu / max(phases["fixed_rate"]["requests"], 1), 3
            )
            window = (window_start, time.time_ns())
            if not args.skip_saturation:
                before = loadavg()
                phases["saturation"] = wrk(
                    url, script, base / "ids-saturation", threads=args.threads, seconds=args.duration, **opts
                )
                phases["saturation"]["loadavg_1m"] = {"before": before, "after": loadavg()}
            progress = None
            if workers is not None:
                query = "SELECT plugin, status, COUNT(*) FROM job_queue GROUP BY plugin, status"
                counts = {(p, s): n for p, s, n in sqlite_query(config.db_path, query)}
                progress = {
                    "succeeded_by_end": sum(n for (_, s), n in counts.items() if s == "succeeded"),
                    **(
                        {"backlog": backlog, "backlog_left": backlog - counts.get(("nop", "succeeded"), 0)}
                        if backlog
                        else {}
                    ),
                }
        finally:
            if workers is not None:
                # A second SIGTERM forces: the workers would otherwise drain the whole backlog.
                workers.send_signal(signal.SIGTERM)
                time.sleep(0.5)
                stop_process(workers, timeout=30)
            api_rc = stop_process(api)
        ids = [i for phase in phases.values() for i in phase.pop("ids")]
        accepted = sum(phase["statuses"].get("202", 0) for phase in phases.values())
        # wrk stops with up to one request per connection unanswered; the fixed-rate client waits for its answers.
        check = queue_check(config, ids, accepted, 2 * args.connections, variant)
        result = summarise(variant, phases, check, progress, api_rc)
        if args.profile:
            result["api_profile"] = api_profile(base, window)
        return result


def api_profile(base: Path, window: tuple[int, int]) -> dict[str, Any]:
    """Where the API's workers spent each request of the fixed-rate phase (started within
    `window`, time.time_ns()), from the tallies of _profile_gunicorn.py, in ms: the mean over
    those requests and over their slowest 1 %. Every section's wall, then `cpu outside sections`
    (Django, the view, JSON) and `waiting for a CPU or the GIL` (wall no section and no CPU of
    the request's thread covers)."""
    reports = [json.loads(p.read_text()) for p in sorted(base.glob("api-*.json"))]
    tallies = [t for r in reports for t in r["requests"] if window[0] <= t["start_ns"] <= window[1]]
    tallies.sort(key=lambda t: t["wall"])
    if not tallies:
        return {"requests": 0}

    def mean_ms(group: list[dict[str, int]]) -> dict[str, float]:
        def mean(key: str) -> float:
            return sum(t.get(key, 0) for t in group) / len(group) / 1e6

        fixed = ("cpu", "wall", "start_ns", "cpu in sections")
        out = {k: round(mean(k), 3) for k in sorted({k for t in group for k in t}) if k not in fixed}
        outside = mean("cpu") - mean("cpu in sections")
        out["cpu outside sections (Django, view, JSON)"] = round(outside, 3)
        out["waiting for a CPU or the GIL"] = round(mean("wall") - sum(out.values()), 3)
        out["wall"] = round(mean("wall"), 3)
        return out

    slowest = tallies[-max(1, len(tallies) // 100) :]
    return {
        "requests": len(tallies),
        "processes": len(reports),
        "mean_ms": mean_ms(tallies),
        "slowest_1pct_mean_ms": mean_ms(slowest),
    }


def wrk_summary(measured: dict[str, Any]) -> dict[str, Any]:
    seconds = measured["duration_us"] / 1e6
    non_2xx = sum(n for code, n in measured["statuses"].items() if not code.startswith("2"))
    return {
        "requests": measured["requests"],
        "seconds": round(seconds, 2),
        "requests_per_s": round(measured["requests"] / seconds, 1),
        "latency_ms": {k: round(v / 1000, 2) for k, v in measured["latency_us"].items()},
        "statuses": measured["statuses"],
        "errors": {**measured["errors"], "non_2xx": non_2xx},
        **({"loadavg_1m": measured["loadavg_1m"]} if "loadavg_1m" in measured else {}),
    }


def error_count(phase: dict[str, Any]) -> int:
    non_2xx = sum(n for code, n in phase["statuses"].items() if not code.startswith("2"))
    return non_2xx + sum(n for kind, n in phase["errors"].items() if kind not in ("status", "non_2xx"))


def summarise(
    variant: str, phases: dict[str, dict[str, Any]], check: dict[str, Any], progress: dict[str, int] | None, api_rc: int
) -> dict[str, Any]:
    rate = phases["fixed_rate"]
    saturation = wrk_summary(phases["saturation"]) if "saturation" in phases else None
    warmup = wrk_summary(phases["warmup"])
    result: dict[str, Any] = {
        "variant": variant,
        "fixed_rate": rate,
        "saturation": saturation,
        "warmup": {k: warmup[k] for k in ("requests", "requests_per_s", "statuses", "errors")},
        "queue_check": check,
        "api_exit_code": api_rc,
    }
    if progress is not None:
        result["workers"] = progress
    result["target"] = {
        "rate_sustained": rate["requests_per_s"] >= rate["rate"] * 0.99,
        "p99": rate["latency_ms"]["p99"] <= P99_MS[variant],
        "zero_errors": all(error_count(p) == 0 for p in (rate, saturation, warmup) if p is not None),
        "every_job_queued": check["ok"],
    }
    if saturation is not None and variant != "drain":
        result["target"]["requests_per_s"] = saturation["requests_per_s"] >= TARGET["requests_per_s"]
    result["target_met"] = all(result["target"].values())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=30, help="measured seconds per variant")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument(
        "--rate", type=float, default=0.0, help="requests/s of the fixed-rate phase (default: 500; 300 for drain)"
    )
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--variants", default="queued,workers,drain")
    parser.add_argument(
        "--backlog", type=int, default=0, help="drain: jobs queued first (default: enough to outlast the load)"
    )
    parser.add_argument("--skip-saturation", action="store_true", help="no wrk saturation phase")
    parser.add_argument("--profile", action="store_true", help="diagnostics: where the API's time goes per request")
    parser.add_argument(
        "--workers-nice", type=int, default=0, help="diagnostics: run runworkers at this niceness (workers variant)"
    )
    parser.add_argument(
        "--gunicorn-config", default=str(GUNICORN_CONFIG), help="diagnostics: another config (e.g. with timing hooks)"
    )
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    for variant in variants:
        if variant not in RATE:
            parser.error(f"unknown variant {variant!r} ({', '.join(RATE)})")
    runs = []
    for index in range(args.runs):
        for variant in variants:
            result = run_variant(variant, args)
            print(json.dumps({"run": index + 1, **result}), flush=True)
            runs.append({"run": index + 1, **result})
    names = ("duration", "warmup", "connections", "rate", "threads", "gunicorn_config", "workers_nice", "backlog")
    settings = {k: getattr(args, k) for k in names}
    env = {k: os.environ[k] for k in ("DUCTILE_API_PROCESSES", "DUCTILE_API_THREADS") if k in os.environ}
    emit({"benchmark": "api", "machine": machine(), "settings": settings, "gunicorn_env": env, "runs": runs}, args.out)


if __name__ == "__main__":
    main()
