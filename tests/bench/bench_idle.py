"""Benchmark 3: an idle daemon's CPU and memory.

    .venv/bin/python tests/bench/bench_idle.py [--settle 5] [--window 30] [--out FILE]

`manage.py runworkers` (2 threads, one plugin configured so the idle re-check really queries the
ledger) is started with an empty queue. After it logs "runworkers started" and a further
--settle seconds, CPU is measured over --window seconds from /proc/<pid>/stat (utime + stime of
all its threads; plugins are not running, so no children) and memory from /proc/<pid>/status.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from _common import (
    NOP_SCRIPT,
    BenchConfig,
    cpu_seconds,
    emit,
    helper,
    machine,
    start_workers,
    stop_process,
    temp_dir,
    wait_until,
)


def status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def run(settle: float, window: float) -> dict[str, Any]:
    with temp_dir("idle") as base:
        config = BenchConfig(base, {"nop": NOP_SCRIPT})
        helper(config, "enqueue", "0", "nop")  # migrate the fresh ledger before the daemon starts
        log_path = base / "runworkers.log"
        proc = start_workers(config, log_path)
        try:
            wait_until(lambda: b"runworkers started" in log_path.read_bytes(), timeout=60, what="runworkers start")
            time.sleep(settle)
            before, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(window)
            after, t1 = cpu_seconds(proc.pid), time.monotonic()
            st = status(proc.pid)
            alive = proc.poll() is None
        finally:
            rc = stop_process(proc)
        used = after - before
        return {
            "settle_seconds": settle,
            "window_seconds": round(t1 - t0, 2),
            "clock_ticks_per_s": os.sysconf("SC_CLK_TCK"),
            "cpu_seconds": round(used, 3),
            "cpu_percent_of_one_core": round(100 * used / (t1 - t0), 2),
            "rss_mb": round(int(st["VmRSS"].split()[0]) / 1024, 1),
            "rss_peak_mb": round(int(st["VmHWM"].split()[0]) / 1024, 1),
            "threads": int(st["Threads"]),
            "alive_throughout": alive,
            "daemon_exit_code": rc,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    emit({"benchmark": "idle", "machine": machine(), **run(args.settle, args.window)}, args.out)


if __name__ == "__main__":
    main()
