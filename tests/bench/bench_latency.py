"""Benchmark 2: latency from enqueue commit to plugin start, on an idle daemon.

    .venv/bin/python tests/bench/bench_latency.py [--jobs 200] [--interval-ms 20] [--out FILE]

`manage.py runworkers` (2 threads) is started and left idle; then a separate process
(_ledger_helper.py trickle) enqueues jobs one at a time, --interval-ms apart, recording for each
the wall-clock time right after its transaction COMMITs (an on_commit callback registered before
the gateway's own wake-up callback). The plugin is a POSIX sh script whose first action is
`date +%s%N`; it writes that stamp to a file named by its job id. Latency = plugin stamp - commit.

The plugin's own stamp is the primary number because it is what "the plugin started" means to a
plugin author: it includes claim, preflight, fork/exec of /bin/sh and the exec of `date` (a
fraction of a millisecond, so it slightly overstates). Two earlier points come from the ledger to
split the latency up: `job_queue.started_at` (the claim's clock reading, taken just before the
claim query) and `job_stopwatch.enter_wall_ns` (time.time_ns() just before Popen).
All clocks are CLOCK_REALTIME on one host.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from _common import (
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


def stamp_script(stamp_dir: Path) -> str:
    # Parameter expansion, not sed/grep: no extra process between start and stamp except `date`.
    return (
        "#!/bin/sh\n"
        "t=$(date +%s%N)\n"
        "req=$(cat)\n"
        'id=${req#*\\"job_id\\":\\"}\n'
        'id=${id%%\\"*}\n'
        f'printf "%s\\n" "$t" > "{stamp_dir}/$id"\n'
        'printf \'{"status":"ok","result":"x"}\'\n'
    )


def stats_ms(values_ns: list[int]) -> dict[str, float]:
    ms = [v / 1e6 for v in values_ns]
    return {
        "p50": round(percentile(ms, 50), 2),
        "p90": round(percentile(ms, 90), 2),
        "p99": round(percentile(ms, 99), 2),
        "max": round(max(ms), 2),
        "mean": round(statistics.fmean(ms), 2),
        "min": round(min(ms), 2),
    }


def run(jobs: int, interval_ms: float) -> dict[str, Any]:
    with temp_dir("lat") as base:
        stamps = base / "stamps"
        stamps.mkdir()
        config = BenchConfig(base, {"stamp": stamp_script(stamps)})
        helper(config, "enqueue", "0", "stamp")  # migrate the fresh ledger before the daemon starts
        log_path = base / "runworkers.log"
        proc = start_workers(config, log_path)
        try:
            wait_until(lambda: b"runworkers started" in log_path.read_bytes(), timeout=60, what="runworkers start")
            time.sleep(1.0)  # idle: threads parked on their wake condition
            produced = helper(config, "trickle", str(jobs), str(interval_ms), "stamp", timeout=120 + jobs)
            wait_until(
                lambda: (
                    len(list(stamps.iterdir())) >= jobs
                    and sqlite_query(config.db_path, "SELECT COUNT(*) FROM job_queue WHERE status = 'succeeded'")[0][0]
                    >= jobs
                ),
                timeout=60,
                what="all jobs done",
            )
        finally:
            rc = stop_process(proc)
        started_at = dict(sqlite_query(config.db_path, "SELECT id, started_at FROM job_queue"))
        spawn_at = dict(sqlite_query(config.db_path, "SELECT job_id, enter_wall_ns FROM job_stopwatch"))
        to_claim, to_spawn, to_plugin = [], [], []
        for job_id, commit_ns in produced["jobs"]:
            plugin_ns = int((stamps / job_id).read_text().strip())
            to_plugin.append(plugin_ns - commit_ns)
            to_spawn.append(spawn_at[job_id] - commit_ns)
            to_claim.append(int(parse_ts(started_at[job_id]) * 1e9) - commit_ns)
        return {
            "jobs": jobs,
            "interval_ms": interval_ms,
            "daemon_exit_code": rc,
            "commit_to_plugin_start_ms": stats_ms(to_plugin),
            "commit_to_claim_ms": stats_ms(to_claim),
            "commit_to_spawn_ms": stats_ms(to_spawn),
            "spawn_to_plugin_start_ms": stats_ms([p - s for p, s in zip(to_plugin, to_spawn, strict=True)]),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    result = run(args.jobs, args.interval_ms)
    emit({"benchmark": "latency", "machine": machine(), **result}, args.out)


if __name__ == "__main__":
    main()
