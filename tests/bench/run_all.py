"""Run every benchmark in sequence and keep their JSON results.

    .venv/bin/python tests/bench/run_all.py [--out-dir DIR] [--quick]

Writes DIR/throughput.json, latency.json, idle.json, queue_ops.json, pipeline.json,
scheduler.json, api.json and console.json (DIR defaults to a new temporary directory, printed at
the end) and prints a one-screen summary. About 21 minutes on a 2-core VM; --quick (about 8
minutes) runs one throughput repetition, a 10 s idle window, 50 pipeline trees, a 30 s scheduler
window with a 2,000-job history, 10 s API phases and a 200,000-job console ledger instead. The
pipeline, scheduler and API benchmarks run once here (SQLite only for the scheduler); alone they
run three times by default.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out_dir or tempfile.mkdtemp(prefix="ductile-bench-results-"))
    out.mkdir(parents=True, exist_ok=True)
    plan = {
        "throughput": ["bench_throughput.py", "--repeat", "1" if args.quick else "3"],
        "latency": ["bench_latency.py"],
        "idle": ["bench_idle.py", *(["--window", "10"] if args.quick else [])],
        "queue_ops": ["bench_queue_ops.py"],
        "pipeline": ["bench_pipeline.py", "--runs", "1", *(["--trees", "50", "--cli-runs", "3"] if args.quick else [])],
        "scheduler": [
            "bench_scheduler.py",
            "--runs",
            "1",
            *(["--window", "30", "--history", "2000"] if args.quick else []),
        ],
        "api": ["bench_api.py", "--runs", "1", *(["--duration", "10"] if args.quick else [])],
        "console": ["bench_console.py", *(["--jobs", "200000", "--requests", "10"] if args.quick else [])],
    }
    results = {}
    for name, cmd in plan.items():
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        subprocess.run(
            [sys.executable, str(BENCH / cmd[0]), *cmd[1:], "--out", str(out / f"{name}.json")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        results[name] = json.loads((out / f"{name}.json").read_text())
    t, lat, idle, ops, pipe, sched, api, console = (results[k] for k in plan)
    worst = max(console["pages"].items(), key=lambda item: item[1]["p95_ms"])
    ticks = sched["runs"][0]["ticks"]
    fires = {f["scenario"]: f for f in sched["runs"][0]["fire"]}
    pipe_ms = pipe["runs"][0]["ms"]
    s = t["summary"]
    lines = [
        f"machine: {t['machine']}",
        f"throughput (jobs/s, median): ours {s['ours_jobs_per_s']} (steady {s['ours_steady_jobs_per_s']}),"
        f" ceiling {s['ceiling_jobs_per_s']}, django-q2 {s.get('djq_jobs_per_s')}"
        f" -> ours/ceiling {s['ours_over_ceiling']} (target >= 0.5),"
        f" ours/django-q2 {s.get('ours_over_djq')} (target ~4)",
        f"daemon CPU per job: {s['ours_daemon_cpu_ms_per_job']} ms",
        f"latency commit->plugin start: p50 {lat['commit_to_plugin_start_ms']['p50']} ms (target <= 10),"
        f" p99 {lat['commit_to_plugin_start_ms']['p99']} ms (target <= 50)",
        f"idle: {idle['cpu_percent_of_one_core']}% of one core (target <= 1), RSS {idle['rss_mb']} MB (target <= 100)",
        f"ledger CPU per job (queue_ops): {ops['worker_ledger_cpu_us_per_job']} us"
        f" (claim_next {ops['claim_next_us']['cpu']}, record_outcome {ops['record_outcome_us']['cpu']},"
        f" pre-check {ops['precheck_exists_us']['cpu']}, state {ops['plugin_state_current_us']['cpu']})",
        f"pipeline, 3 steps, gateway overhead: p50 {pipe_ms['overhead']['p50']} ms (target <= 30),"
        f" p99 {pipe_ms['overhead']['p99']} ms; synchronous caller p50 {pipe_ms['caller']['p50']} ms"
        f" (TreeWaiter exit {pipe_ms['caller.waiter_exit']['p50']} ms)",
        f"scheduler, 1,000 entries: idle tick p50 {ticks['idle_tick_ms']['wall']['p50']} ms,"
        f" p99 {ticks['idle_tick_ms']['wall']['p99']} ms (target <= 20);"
        f" per fired entry p50 {ticks['due_tick_ms'][2]['per_fired_entry_wall']['p50']} ms (k = 100)",
        *(
            f"scheduler fire time ({name}): commit - due p99 {f['commit_minus_due_ms']['p99']} ms,"
            f" created_at - due p99 {f['created_minus_due_ms']['p99']} ms (target <= 1000)"
            for name, f in fires.items()
        ),
        *(
            f"API ({r['variant']}): {r['fixed_rate']['requests_per_s']} requests/s at p99"
            f" {r['fixed_rate']['latency_ms']['p99']} ms (target >= 500 at <= 25), saturation"
            f" {r['saturation']['requests_per_s']} requests/s;"
            f" queue check {'ok' if r['queue_check']['ok'] else 'FAILED'}"
            for r in api["runs"]
        ),
        f"audit console, {console['jobs']:,} jobs: list p95 {console['pages']['list']['p95_ms']} ms,"
        f" job page p95 {console['pages']['job page: pipeline step']['p95_ms']} ms,"
        f" slowest page {worst[0]} p95 {worst[1]['p95_ms']} ms"
        f" (target <= 300: {'met' if console['met'] else 'MISSED'})",
        f"results: {out}",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
