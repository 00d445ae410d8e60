"""Benchmark: does adding worker nodes add throughput? (issue 38, "Scaling"; needs root).

    .venv/bin/python tests/bench/bench_cluster.py [--jobs 240] [--sleep 0.2] [--slots 4] [--out FILE]

Nodes are Linux network namespaces on one bridge and PostgreSQL has a namespace of its own
(tests/support/cluster.py), so every claim and completion crosses a real network stack. A backlog
of `--jobs` jobs that each sleep `--sleep` seconds (a shell plugin: sleep-bound, like a plugin
waiting on an API, and cheap to start, so that the 2-core machine's CPU is not the limit) is
drained first by one node, then by three, each with `--slots` worker slots
(service.max_workers) and no `parallelism` set. The figure is one node's drain time over three
nodes' (target >= 2.7); each drain is timed from the first job's start to the last one's end, so
the nodes' own start-up is not counted. Both drains run in the same cluster, one after the other.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402
from _common import emit, machine, write_plugin  # noqa: E402

from tests.support.cluster import Cluster, available, cluster  # noqa: E402
from tests.support.config_dirs import ConfigDir  # noqa: E402
from tests.support.output import Output  # noqa: E402
from tests.support.processes import ledger  # noqa: E402


def drain(
    made: Cluster, config: ConfigDir, nodes: list[str], jobs: int, sleep: float, plugin: str = "sleeper"
) -> dict[str, Any]:
    """Enqueue the backlog, start `nodes`' daemons, and time the drain (module docstring)."""
    with psycopg.connect(made.database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE job_queue, job_transitions, job_log, job_attempts, event_log, job_stopwatch")
    specs = [{"plugin": plugin, "command": "poll", "submitted_by": "cli"} for _ in range(jobs)]
    ledger(config, "enqueue", specs)
    started = time.monotonic()
    daemons = [made.start(node, config, "runworkers") for node in nodes]
    # Read, not left in the pipe: a daemon whose log pipe is full blocks in its logging lock (a
    # first version of this bench stalled so after ~340 jobs a node).
    outputs = [Output(daemon) for daemon in daemons]
    try:
        with psycopg.connect(made.database_url, autocommit=True) as conn:
            while True:
                left = conn.execute("SELECT COUNT(*) FROM job_queue WHERE status <> 'succeeded'").fetchone()
                if left is not None and left[0] == 0:
                    break
                if time.monotonic() - started > 600:
                    raise RuntimeError(f"{left} jobs left after 600 s")
                time.sleep(0.2)
            first, last, claimants = conn.execute(
                "SELECT MIN(started_at), MAX(completed_at), COUNT(DISTINCT claimed_by) FROM job_queue"
            ).fetchone() or (None, None, 0)
    finally:
        for daemon in daemons:
            daemon.send_signal(signal.SIGTERM)
        for daemon, output in zip(daemons, outputs, strict=True):
            daemon.wait(timeout=120)
            output.finish()
    seconds = (last - first).total_seconds()
    return {
        "nodes": len(nodes),
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "jobs_per_s": round(jobs / seconds, 1),
        "nodes_that_claimed": claimants,
        "ideal_seconds": round(jobs * sleep / (len(nodes) * int(config.service["max_workers"])), 3),
    }


def claims(made: Cluster, config: ConfigDir, nodes: list[str], jobs: int) -> dict[str, Any]:
    """No-op jobs drained by every node at once: how many claims a second the ledger decides, and
    what a claim's statements cost on the server (PostgreSQL's own log of every statement's
    duration): the advisory lock that serialises claim decisions (its wait is the queue behind
    it) and the claiming UPDATE."""
    with psycopg.connect(made.database_url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET log_min_duration_statement = 0")
        conn.execute("SELECT pg_reload_conf()")
    log = made.workdir / "pg.log"
    start = log.stat().st_size
    try:
        drained = drain(made, config, nodes, jobs, 0.0, plugin="noop")
    finally:
        with psycopg.connect(made.database_url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET log_min_duration_statement")
            conn.execute("SELECT pg_reload_conf()")
    with log.open() as text:
        text.seek(start)
        lock, update = durations(text.read())
    return {**drained, "advisory_lock_ms": lock, "claim_update_ms": update}


def durations(log: str) -> tuple[dict[str, float], dict[str, float]]:
    """p50/p99/max of the claim's two statements in PostgreSQL's statement log."""
    lock: list[float] = []
    update: list[float] = []
    # A statement's text goes on over the lines after its "duration:" line, each indented.
    records: list[str] = []
    for line in log.splitlines():
        if "duration: " in line:
            records.append(line)
        elif records and line[:1].isspace():
            records[-1] += " " + line.strip()
    for record in records:
        ms = float(record.split("duration: ", 1)[1].split(" ms", 1)[0])
        if "pg_advisory_xact_lock" in record:
            lock.append(ms)
        elif "UPDATE job_queue SET status = 'running'" in record:
            update.append(ms)
    return summary(lock), summary(update)


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50": round(statistics.median(ordered), 3),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "max": round(ordered[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=240, help="jobs of the scaling drains (0: skip them)")
    parser.add_argument("--sleep", type=float, default=0.2)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--claims", type=int, default=3000, help="no-op jobs for the claim-rate phase (0: skip)")
    parser.add_argument("--claim-slots", type=int, default=8, help="worker slots a node in the claim-rate phase")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    if (why := available()) is not None:
        raise SystemExit(f"bench_cluster cannot run here: {why}")
    with tempfile.TemporaryDirectory(prefix="ductile-bench-cluster-") as tmp, cluster(("a", "b", "c")) as made:
        root = Path(tmp) / "plugins"
        write_plugin(
            root,
            "sleeper",
            f'#!/bin/sh\ncat >/dev/null\nsleep {args.sleep}\nprintf \'{{"status":"ok","result":"x"}}\'\n',
        )
        write_plugin(root, "noop", '#!/bin/sh\ncat >/dev/null\nprintf \'{"status":"ok","result":"x"}\'\n')
        config = ConfigDir(Path(tmp) / "config")
        config.service.update(max_workers=args.slots, lease_ttl="60s")
        config.plugins = {
            name: {"config": {}, "timeout": "60s", "retry": {"max_attempts": 1}} for name in ("sleeper", "noop")
        }
        config.extra["plugin_roots"] = [str(root)]
        config.database_url = made.database_url
        config.write()
        ledger(config, "enqueue", [])  # the ledger's schema, once, before the first drain truncates it
        one = three = None
        if args.jobs:
            one = drain(made, config, ["a"], args.jobs, args.sleep)
            three = drain(made, config, ["a", "b", "c"], args.jobs, args.sleep)
        rate = None
        if args.claims:
            config.service.update(max_workers=args.claim_slots)
            config.write()
            rate = claims(made, config, ["a", "b", "c"], args.claims)
    emit(
        {
            "benchmark": "cluster",
            "machine": machine(),
            "slots_per_node": args.slots,
            "sleep_seconds": args.sleep,
            "one_node": one,
            "three_nodes": three,
            "three_over_one": round(one["seconds"] / three["seconds"], 2) if one and three else None,
            "target": ">= 2.7",
            "claims_three_nodes": rate,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
