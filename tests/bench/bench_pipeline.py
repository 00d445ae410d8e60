"""Benchmark 5: gateway overhead of a 3-step pipeline of a trivial plugin, on an idle daemon.

    .venv/bin/python tests/bench/bench_pipeline.py [--runs 3] [--trees 200] [--gap-ms 100]
                                                   [--cli-runs 10] [--out FILE]

Targets: gateway overhead = tree wall time - sum of plugin time, p50 <= 30 ms on SQLite
(pipelines issue); issue 16: per hop p50 <= 2 ms (the 3-step tree <= 6 ms), p99 <= 10 ms per tree.

Set-up, per run: a fresh config directory and SQLite ledger; one plugin `step` (POSIX sh:
`cat >/dev/null; printf '{"status":"ok","result":"ok"}'`, manifest command `handle`) and one
pipeline `bench-chain` (`execution_mode: synchronous`) with steps a, b, c, each `uses: step`.
A step that succeeds without events routes a synthetic `ductile.step.succeeded` to the next, so
each tree is exactly three jobs: a -> b -> c. `manage.py runworkers` (2 threads) is started and
left idle for 1 s. Then a separate process (_ledger_helper.py pipeline) runs --trees synchronous
runs one after another through `gateway.intake.events.run_synchronously` (what the synchronous API
calls): each starts --gap-ms after the previous one returned, so the daemon's threads are parked
on their wake condition when the root is enqueued.

Measured from the ledger (all per tree; timestamps are Django DateTimeFields, stored by SQLite
as text with microseconds; wall clock, one host):

- wall       = c.completed_at - a.created_at. `created_at` is the enqueue's clock reading (before
               its transaction commits); `completed_at` is record_outcome's clock reading, taken
               before that transaction (so the last job's own commit is not in `wall`).
- plugins    = sum of job_stopwatch.dur_ns of a, b, c: each plugin process from just before
               Popen to its reaping (fork/exec of /bin/sh and `cat` included).
- overhead   = wall - plugins: the number the target is about.

Per hop, a breakdown that adds up to `wall` exactly (a child's created_at IS its parent's
completed_at: the same clock reading, the child being enqueued in the transaction that ends the
parent):

- queue wait    = started_at - created_at. `started_at` is the claim's clock reading, taken before
                  the read-only pre-check and the claim. Hop a: the caller's enqueue transaction,
                  its commit, the UNIX-datagram poke, the worker thread waking. Hops b, c: the
                  parent's whole completion transaction (child insert, status, log, stopwatch,
                  event_log, COMMIT), the in-process wake-up, the loop back to the claim.
- claim         = (job_stopwatch.enter_wall_ns - runtime_pre_ns) - started_at: the read-only
                  pre-check (only after an idle wait) and claim_next's write transaction, up to
                  the executor's start.
- preflight     = job_stopwatch.runtime_pre_ns: the executor up to Popen (event_context read,
                  `with:` remap, plugin state read, request build).
- plugin        = dur_ns.
- post-plugin   = completed_at - (enter_wall_ns + dur_ns): judge the response, route (synthetic
                  success event, successor lookup, child spec), hooks; up to record_outcome's
                  clock reading.
- overhead      = the hop's gateway overhead: completed_at - created_at - plugin (the four
                  parts above but the plugin). The three hops' overheads add up to the tree's.

What the synchronous caller sees, from the helper's own clock (time.time_ns()); the helper
installs a subclass of the product's TreeWaiter that only adds two clock readings:

- caller          = run_synchronously's return - just before the call.
- caller overhead = caller - plugins.
- caller.to_waiter_entered = resolving the entry job and TreeWaiter.__enter__ (binds a UNIX
                  datagram socket, starts its listener thread).
- caller.waiter_entered_to_root = up to the enqueue's clock reading (a.created_at).
- caller.last_completed_to_wait_return = c.completed_at -> waiter.wait() returns: c's completion
                  transaction and COMMIT, the finish poke to the waiter's socket, the waiter's
                  wake-up and its final tree read.
- caller.waiter_exit = waiter.wait() returns -> run_synchronously returns: TreeWaiter.__exit__.

--trace (diagnostic) runs the daemon under _trace_daemon.py, which wraps Executor._record and
the wake-up dispatch to read the clock at COMMIT and when the job's recording is done:

- record_to_commit      = completed_at -> COMMIT returned and the gate released (child enqueue,
                          status, log, stopwatch, event_log, the claim of the worker's next job
                          (the child itself on a sequential pipeline), COMMIT).
- on_commit_callbacks   = the wake-up callbacks after the commit (in-process worker wake-up,
                          the finish poke to tree waiters) and the job's log lines. Other
                          processes' workers are poked before the commit (ledger.job_notifications).
- parent_commit_to_claim (hops b, c) = parent's COMMIT returned -> child's started_at. Negative
                          when the finishing thread claims the child inside the parent's own
                          transaction (the usual case): the claim then comes before that COMMIT.
So hop b's queue wait = a.record_to_commit + b.parent_commit_to_claim.

--cli-runs N more trees are started as an agent would, `manage.py pipeline run bench-chain
--config-dir DIR --wait --json`, one process each: the process wall time (Python and Django
start-up included) and the same ledger overhead are reported for those too.

Percentiles are nearest-rank. Each run is a fresh daemon and ledger; per-run numbers are kept,
and the summary gives the median across runs and the spread (min-max).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import time
from collections import Counter
from typing import Any

from _common import (
    BENCH,
    PYTHON,
    REPO,
    BenchConfig,
    emit,
    helper,
    machine,
    parse_ts,
    percentile,
    sqlite_query,
    start_workers,
    stop_process,
    temp_dir,
    wait_until,
)

PIPELINE = "bench-chain"
STEP_SCRIPT = '#!/bin/sh\ncat >/dev/null; printf \'{"status":"ok","result":"ok"}\'\n'
COMMANDS = [{"name": "handle", "type": "write"}, {"name": "poll", "type": "read"}]
PIPELINES = [
    {
        "name": PIPELINE,
        "on": "bench.chain",
        "execution_mode": "synchronous",
        "timeout": "60s",
        "steps": [{"id": "a", "uses": "step"}, {"id": "b", "uses": "step"}, {"id": "c", "uses": "step"}],
    }
]
HOPS = ("a", "b", "c")
TARGET_P50_MS = 30.0
# Issue 16: gateway overhead per hop p50, per 3-step tree p50 and p99.
TARGET_HOP_P50_MS, TARGET_TREE_P50_MS, TARGET_TREE_P99_MS = 2.0, 6.0, 10.0


def stats_ms(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 2),
        "p95": round(percentile(values, 95), 2),
        "p99": round(percentile(values, 99), 2),
        "max": round(max(values), 2),
        "mean": round(statistics.fmean(values), 2),
        "min": round(min(values), 2),
    }


def ledger_trees(config: BenchConfig, roots: list[str]) -> dict[str, list[dict[str, Any]]]:
    """root id -> its three jobs a, b, c (each with the job row and its stopwatch), checked."""
    jobs = {
        row[0]: {
            "id": row[0],
            "parent": row[1],
            "plugin": row[2],
            "status": row[3],
            "created": parse_ts(row[4]),
            "started": parse_ts(row[5]),
            "completed": parse_ts(row[6]),
        }
        for row in sqlite_query(
            config.db_path,
            "SELECT id, parent_job_id, plugin, status, created_at, started_at, completed_at FROM job_queue",
        )
    }
    watches = {
        row[0]: {"enter_ns": row[1], "exit_ns": row[2], "dur_ns": row[3], "pre_ns": row[4], "post_ns": row[5]}
        for row in sqlite_query(
            config.db_path,
            "SELECT job_id, enter_wall_ns, exit_wall_ns, dur_ns, runtime_pre_ns, runtime_post_ns FROM job_stopwatch",
        )
    }
    children: dict[str, list[str]] = {}
    for job in jobs.values():
        if job["parent"]:
            children.setdefault(job["parent"], []).append(job["id"])
    trees = {}
    for root in roots:
        chain = [root]
        while len(children.get(chain[-1], [])) == 1:
            chain.append(children[chain[-1]][0])
        if len(chain) != 3 or children.get(chain[-1]):
            raise RuntimeError(f"tree {root} is not a 3-job chain: {chain} (+{children.get(chain[-1])})")
        hops = [{**jobs[j], **watches[j]} for j in chain]
        bad = [h for h in hops if h["status"] != "succeeded" or h["plugin"] != "step"]
        if bad:
            raise RuntimeError(f"tree {root}: jobs did not succeed: {bad}")
        trees[root] = hops
    return trees


def tree_metrics(hops: list[dict[str, Any]], trace: dict[str, dict[str, int]] | None = None) -> dict[str, float]:
    """Milliseconds for one tree (see the module docstring)."""
    a, c = hops[0], hops[-1]
    wall = (c["completed"] - a["created"]) * 1e3
    plugins = sum(h["dur_ns"] for h in hops) / 1e6
    out = {"wall": wall, "plugins": plugins, "overhead": wall - plugins}
    for name, h in zip(HOPS, hops, strict=True):
        spawn_ms = h["enter_ns"] / 1e6
        out[f"{name}.queue_wait"] = (h["started"] - h["created"]) * 1e3
        out[f"{name}.claim"] = spawn_ms - h["pre_ns"] / 1e6 - h["started"] * 1e3
        out[f"{name}.preflight"] = h["pre_ns"] / 1e6
        out[f"{name}.plugin"] = h["dur_ns"] / 1e6
        out[f"{name}.post_plugin"] = h["completed"] * 1e3 - spawn_ms - h["dur_ns"] / 1e6
        out[f"{name}.overhead"] = (h["completed"] - h["created"]) * 1e3 - h["dur_ns"] / 1e6
    if trace is not None:
        previous = None
        for name, h in zip(HOPS, hops, strict=True):
            t = trace[h["id"]]
            out[f"{name}.record_to_commit"] = t["commit_ns"] / 1e6 - h["completed"] * 1e3
            out[f"{name}.on_commit_callbacks"] = (t["return_ns"] - t["commit_ns"]) / 1e6
            if previous is not None:
                out[f"{name}.parent_commit_to_claim"] = h["started"] * 1e3 - previous["commit_ns"] / 1e6
            previous = t
    return out


def timestamp_resolution(config: BenchConfig) -> dict[str, Any]:
    """How the ledger stores the DateTimeFields this benchmark reads: count of fraction widths."""
    rows = sqlite_query(config.db_path, "SELECT created_at, started_at, completed_at FROM job_queue")
    widths: Counter[int] = Counter()
    sample = rows[0][0] if rows else None
    for row in rows:
        for text in row:
            match = re.search(r"\.(\d+)", text or "")
            widths[len(match.group(1)) if match else 0] += 1
    return {"sample": sample, "fraction_digits": dict(sorted(widths.items()))}


def summarise(per_tree: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {key: stats_ms([t[key] for t in per_tree]) for key in per_tree[0]}


def cli_trees(config: BenchConfig, count: int) -> tuple[list[str], list[float]]:
    roots, walls = [], []
    for n in range(count):
        time.sleep(0.1)
        started = time.perf_counter()
        proc = subprocess.run(
            [
                PYTHON,
                str(REPO / "manage.py"),
                "pipeline",
                "run",
                PIPELINE,
                "--config-dir",
                str(config.path),
                "--payload",
                json.dumps({"n": n, "via": "cli"}),
                "--wait",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=config.env(),
            cwd=REPO,
        )
        walls.append((time.perf_counter() - started) * 1e3)
        if proc.returncode != 0:
            raise RuntimeError(f"pipeline run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        answer = json.loads(proc.stdout)
        roots.append(answer["job_id"])
    return roots, walls


def run(trees: int, gap_ms: float, cli_runs: int, traced: bool) -> dict[str, Any]:
    with temp_dir("pipe") as base:
        config = BenchConfig(base, {"step": STEP_SCRIPT}, commands=COMMANDS, extra={"pipelines": PIPELINES})
        helper(config, "enqueue", "0", "step")  # migrate the fresh ledger before the daemon starts
        log_path = base / "runworkers.log"
        trace_file = base / "trace.jsonl" if traced else None
        if trace_file is not None:
            os.environ["BENCH_TRACE_FILE"] = str(trace_file)  # inherited through config.env()
            proc = start_workers(config, log_path, prefix=[PYTHON, str(BENCH / "_trace_daemon.py")])
        else:
            proc = start_workers(config, log_path)
        try:
            wait_until(lambda: b"runworkers started" in log_path.read_bytes(), timeout=60, what="runworkers start")
            time.sleep(1.0)  # idle: threads parked on their wake condition
            produced = helper(config, "pipeline", str(trees), str(gap_ms), PIPELINE, timeout=120 + trees)
            cli_roots, cli_walls = cli_trees(config, cli_runs)
        finally:
            rc = stop_process(proc)
        rows = produced["trees"]
        failed = [r for r in rows if r["status"] != "succeeded"]
        if failed:
            raise RuntimeError(f"{len(failed)} trees did not succeed, e.g. {failed[0]}")
        chains = ledger_trees(config, [r["root"] for r in rows] + cli_roots)
        trace = None
        if trace_file is not None:
            trace = {row["job"]: row for row in map(json.loads, trace_file.read_text().splitlines())}
        per_tree = []
        for r in rows:
            hops = chains[r["root"]]
            m = tree_metrics(hops, trace)
            a_created, c_completed = hops[0]["created"] * 1e3, hops[-1]["completed"] * 1e3
            m["caller"] = (r["after_ns"] - r["before_ns"]) / 1e6
            m["caller_overhead"] = m["caller"] - m["plugins"]
            m["caller.to_waiter_entered"] = (r["entered_ns"] - r["before_ns"]) / 1e6
            m["caller.waiter_entered_to_root"] = a_created - r["entered_ns"] / 1e6
            m["caller.last_completed_to_wait_return"] = r["waited_ns"] / 1e6 - c_completed
            m["caller.waiter_exit"] = (r["after_ns"] - r["waited_ns"]) / 1e6
            if trace is not None:
                m["caller.last_commit_to_wait_return"] = (r["waited_ns"] - trace[hops[-1]["id"]]["commit_ns"]) / 1e6
            per_tree.append(m)
        result: dict[str, Any] = {
            "trees": trees,
            "gap_ms": gap_ms,
            "traced": traced,
            "daemon_exit_code": rc,
            "timestamps": timestamp_resolution(config),
            "ms": summarise(per_tree),
        }
        if cli_runs:
            cli = [tree_metrics(chains[root]) for root in cli_roots]  # no trace: same keys as untraced runs
            result["cli"] = {
                "trees": cli_runs,
                "process_wall_ms": stats_ms(cli_walls),
                "overhead_ms": stats_ms([m["overhead"] for m in cli]),
                "wall_ms": stats_ms([m["wall"] for m in cli]),
            }
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="fresh daemon and ledger each (default 3)")
    parser.add_argument("--trees", type=int, default=200, help="sequential synchronous runs per run (default 200)")
    parser.add_argument("--gap-ms", type=float, default=100.0, help="idle time before each run (default 100)")
    parser.add_argument("--cli-runs", type=int, default=10, help="extra trees via `manage.py pipeline run --wait`")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="diagnostic: run the daemon under _trace_daemon.py to split each completion transaction",
    )
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    runs = [run(args.trees, args.gap_ms, args.cli_runs, args.trace) for _ in range(args.runs)]

    def across(key: str, stat: str) -> dict[str, float]:
        values = [r["ms"][key][stat] for r in runs]
        return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values)}

    p50 = across("overhead", "p50")
    summary = {
        "overhead_p50_ms": p50,
        "overhead_p95_ms": across("overhead", "p95"),
        "overhead_p99_ms": across("overhead", "p99"),
        "overhead_max_ms": across("overhead", "max"),
        "wall_p50_ms": across("wall", "p50"),
        "plugins_p50_ms": across("plugins", "p50"),
        "caller_p50_ms": across("caller", "p50"),
        "caller_overhead_p50_ms": across("caller_overhead", "p50"),
        "caller_waiter_exit_p50_ms": across("caller.waiter_exit", "p50"),
        "target_p50_ms": TARGET_P50_MS,
        "target_met": p50["max"] <= TARGET_P50_MS,
        "hop_overhead_ms": {hop: {s: across(f"{hop}.overhead", s) for s in ("p50", "p99")} for hop in HOPS},
    }
    hop_p50 = max(summary["hop_overhead_ms"][hop]["p50"]["median"] for hop in HOPS)
    summary["issue16_targets"] = {
        "hop_p50_le_2ms": hop_p50 <= TARGET_HOP_P50_MS,
        "tree_p50_le_6ms": p50["median"] <= TARGET_TREE_P50_MS,
        "tree_p99_le_10ms": summary["overhead_p99_ms"]["median"] <= TARGET_TREE_P99_MS,
    }
    emit({"benchmark": "pipeline", "machine": machine(), "summary": summary, "runs": runs}, args.out)


if __name__ == "__main__":
    main()
