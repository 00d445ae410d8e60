"""Diagnostic: where `runworkers`' own CPU goes per job, section by section, while it drains.

    .venv/bin/python tests/bench/bench_profile.py [--jobs 4000] [--out FILE]

The same set-up as bench_throughput.py's `ours` (2 threads, the minimal `/bin/sh` plugin, the
jobs queued first, SQLite WAL), with the daemon run under _profile_daemon.py: every section's
exclusive thread CPU and wall time per job, ranked, with its share of the process's CPU (user +
system of every thread; the plugin processes are not in it). `unattributed` is process CPU no
section covers (start-up imports, Django set-up, the interpreter between sections). A section's
wall minus its CPU is time spent waiting: for the write gate (`flock`, the thread lock), for
SQLite, for the plugin, or for the GIL.

For the whole picture with call stacks, py-spy (see README.md, "Profiling").
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from _common import (
    BENCH,
    NOP_SCRIPT,
    PYTHON,
    BenchConfig,
    emit,
    helper,
    machine,
    sqlite_query,
    start_workers,
    temp_dir,
)


def run(jobs: int) -> dict[str, Any]:
    with temp_dir("profile") as base:
        config = BenchConfig(base, {"nop": NOP_SCRIPT})
        helper(config, "enqueue", str(jobs), "nop")
        out = base / "profile.json"
        os.environ["BENCH_PROFILE_FILE"] = str(out)  # inherited through config.env()
        load = os.getloadavg()[0]
        started = time.monotonic()
        proc = start_workers(
            config, base / "runworkers.log", "--max-jobs", str(jobs), prefix=[PYTHON, str(BENCH / "_profile_daemon.py")]
        )
        try:
            proc.wait(timeout=max(300, jobs / 10))
        finally:
            os.environ.pop("BENCH_PROFILE_FILE")
            proc._bench_log.close()  # type: ignore[attr-defined]
        elapsed = time.monotonic() - started
        # A profile of a daemon that did not run its jobs is no profile: say so, with its log
        # (a patched name the product no longer has once made it crash at start, unseen).
        done = dict(sqlite_query(config.db_path, "SELECT status, COUNT(*) FROM job_queue GROUP BY status"))
        if proc.returncode != 0 or done.get("succeeded") != jobs:
            log = (base / "runworkers.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"profile: exit {proc.returncode}, jobs {done} of {jobs}; log:\n{log}")
        data = json.loads(out.read_text())
    total = data["process_cpu_ns"]
    sections = sorted(data["sections"].items(), key=lambda kv: -kv[1]["cpu_ns"])
    covered = sum(s["cpu_ns"] for _, s in sections)
    rows = [
        {
            "section": name,
            "calls_per_job": round(s["calls"] / jobs, 2),
            "cpu_us_per_job": round(s["cpu_ns"] / jobs / 1000, 1),
            "share_of_process_cpu": round(s["cpu_ns"] / total, 3),
            "wall_us_per_job": round(s["wall_ns"] / jobs / 1000, 1),
        }
        for name, s in sections
    ]
    rows.append(
        {
            "section": "unattributed (interpreter between sections; start-up excluded)",
            "cpu_us_per_job": round((total - covered) / jobs / 1000, 1),
            "share_of_process_cpu": round((total - covered) / total, 3),
        }
    )
    return {
        "jobs": jobs,
        "jobs_per_s": round(jobs / elapsed, 1),
        "loadavg_1m_at_start": round(load, 2),
        "process_cpu_ms_per_job": round(total / jobs / 1e6, 3),
        "process_system_share": round(data["process_system_ns"] / total, 3),
        "sections": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    result = run(args.jobs)
    for row in result["sections"]:
        print(
            f"{row['share_of_process_cpu'] * 100:5.1f}%  {row['cpu_us_per_job']:7.1f} µs CPU"
            f"  {row.get('wall_us_per_job', float('nan')):8.1f} µs wall"
            f"  {row.get('calls_per_job', '')!s:>5}  {row['section']}"
        )
    print(
        f"process CPU {result['process_cpu_ms_per_job']} ms/job (system {result['process_system_share']:.0%}),"
        f" {result['jobs_per_s']} jobs/s, load {result['loadavg_1m_at_start']}"
    )
    emit({"benchmark": "profile", "machine": machine(), **result}, args.out)


if __name__ == "__main__":
    main()
