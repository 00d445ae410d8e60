"""Benchmark 1: throughput of 2,000 minimal plugin jobs, three ways, on this machine.

    .venv/bin/python tests/bench/bench_throughput.py [--jobs 2000] [--repeat 3] [--skip-djq] [--out FILE]

* ours:     2,000 jobs enqueued first (Job.objects.enqueue in a separate process), then
            `manage.py runworkers --max-jobs N` (service.max_workers 2, plugin parallelism 2,
            SQLite WAL) started as a subprocess. Wall time = last job's completed_at minus the
            moment the subprocess was started (includes the daemon's start-up); `steady` is
            (N-1) / (last completed_at - first completed_at), start-up excluded.
* ceiling:  the same plugin with the same stdin bytes via subprocess.run from a 2-thread
            ThreadPoolExecutor; no database, no bookkeeping.
* djq:      django-q2 1.x, ORM broker on its own SQLite WAL file, 2 workers, one task per job
            that calls subprocess.run on the same plugin. Wall time = last task's `stopped`
            minus the moment `qcluster` was started; `steady` = (N-1) / (last stopped - first stopped)
            (django-q2 stamps `started` at enqueue time, so it cannot mark the start of work).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _common import (
    BENCH,
    NOP_SCRIPT,
    PYTHON,
    REPO,
    BenchConfig,
    clean_env,
    cpu_seconds,
    emit,
    helper,
    machine,
    parse_ts,
    sqlite_query,
    start_workers,
    stop_process,
    temp_dir,
    wait_until,
    write_plugin,
)

THREADS = 2


def sample_request(plugin: str = "nop") -> bytes:
    """A request shaped exactly like the gateway's (gateway.execution.protocol.build_request) for a `poll` job."""
    job_id = str(uuid.uuid4())
    now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    return json.dumps(
        {
            "protocol": 2,
            "job_id": job_id,
            "command": "poll",
            "config": {},
            "state": {},
            "context": {"ductile_plugin": plugin},
            "event": {
                "type": "bench.trigger",
                "payload": {},
                "source": "bench",
                "timestamp": f"{now}.000000Z",
                "event_id": str(uuid.uuid4()),
            },
            "deadline_at": f"{now}.000000Z",
            "instance": plugin,
        },
        separators=(",", ":"),
    ).encode()


def plugin_env() -> dict[str, str]:
    """What gateway.plugins.environment.plugin_environment passes: PATH, HOME, LANG, LC_*, TZ, TMPDIR."""
    keep = ("PATH", "HOME", "LANG", "TZ", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    return env


# -- ours ------------------------------------------------------------------------------------------


def run_ours(jobs: int) -> dict[str, Any]:
    with temp_dir("tput") as base:
        config = BenchConfig(base, {"nop": NOP_SCRIPT}, max_workers=THREADS, parallelism=THREADS)
        enq = helper(config, "enqueue", str(jobs), "nop")
        log_path = base / "runworkers.log"
        t0 = time.time()
        proc = start_workers(config, log_path, "--max-jobs", str(jobs))
        cpu = 0.0
        try:
            deadline = time.monotonic() + max(120, jobs / 20)
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError):  # gone: the last reading before its exit stands
                    cpu = cpu_seconds(proc.pid)
                time.sleep(0.05)
        finally:
            rc = stop_process(proc)
        t_exit = time.time()
        rows = sqlite_query(config.db_path, "SELECT status, COUNT(*) FROM job_queue GROUP BY status")
        counts = dict(rows)
        first_start, first_done, last_done = sqlite_query(
            config.db_path,
            "SELECT MIN(started_at), MIN(completed_at), MAX(completed_at) FROM job_queue WHERE status = 'succeeded'",
        )[0]
        if counts.get("succeeded") != jobs:
            raise RuntimeError(
                f"ours: expected {jobs} succeeded, got {counts} (exit {rc}); log:\n" + log_path.read_text()[-4000:]
            )
        first, first_end, last = parse_ts(first_start), parse_ts(first_done), parse_ts(last_done)
        return {
            "jobs": jobs,
            "exit_code": rc,
            "enqueue_seconds": round(enq["seconds"], 3),
            "wall_seconds": round(last - t0, 3),
            "jobs_per_s": round(jobs / (last - t0), 1),
            "startup_seconds": round(first - t0, 3),
            **steady(jobs, first_end, last),
            "process_exit_seconds": round(t_exit - t0, 3),
            # utime+stime of the daemon itself (plugins excluded), sampled every 50 ms until it exits.
            "daemon_cpu_seconds": round(cpu, 2),
            "daemon_cpu_ms_per_job": round(1000 * cpu / jobs, 2),
        }


# -- ceiling ---------------------------------------------------------------------------------------


def run_ceiling(jobs: int) -> dict[str, Any]:
    with temp_dir("ceil") as base:
        entry = write_plugin(base / "plugins", "nop", NOP_SCRIPT)
        request, env = sample_request(), plugin_env()

        def one(_: int) -> bytes:
            proc = subprocess.run(
                [str(entry)], input=request, capture_output=True, env=env, check=True, start_new_session=True
            )
            return proc.stdout

        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            started = time.perf_counter()
            outputs = list(pool.map(one, range(jobs)))
            elapsed = time.perf_counter() - started
        assert all(out == b'{"status":"ok","result":"x"}' for out in outputs)
        return {"jobs": jobs, "wall_seconds": round(elapsed, 3), "jobs_per_s": round(jobs / elapsed, 1)}


# -- django-q2 -------------------------------------------------------------------------------------


def run_djq(jobs: int) -> dict[str, Any]:
    with temp_dir("djq") as base:
        entry = write_plugin(base / "plugins", "nop", NOP_SCRIPT)
        db = base / "djq.db"
        env = clean_env(DJANGO_SETTINGS_MODULE="djq_settings", BENCH_DJQ_DB=str(db))
        subprocess.run(
            [PYTHON, "-m", "django", "migrate", "--verbosity", "0"],
            env=env,
            cwd=REPO,
            check=True,
            capture_output=True,
            timeout=120,
        )
        proc = subprocess.run(
            [PYTHON, str(BENCH / "_djq_helper.py"), "enqueue", str(jobs), str(entry)],
            input=sample_request(),
            env=env,
            cwd=REPO,
            capture_output=True,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"django-q2 enqueue failed:\n{proc.stderr.decode()}")
        enq = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        log_path = base / "qcluster.log"
        with open(log_path, "wb") as log:
            t0 = time.time()
            cluster = subprocess.Popen(
                [PYTHON, "-m", "django", "qcluster"],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:

                def done() -> bool:
                    if cluster.poll() is not None:
                        raise RuntimeError("qcluster exited early:\n" + log_path.read_text()[-4000:])
                    return sqlite_query(db, "SELECT COUNT(*) FROM django_q_task WHERE success = 1")[0][0] >= jobs

                wait_until(done, timeout=max(120, jobs / 10), interval=0.1, what="django-q2 results")
            finally:
                stop_process(cluster, timeout=30)
        failed = sqlite_query(db, "SELECT COUNT(*) FROM django_q_task WHERE success = 0")[0][0]
        # django-q2 stamps `started` at enqueue time, so only completion times say when work happened.
        first_stop, last_stop = sqlite_query(db, "SELECT MIN(stopped), MAX(stopped) FROM django_q_task")[0]
        first_end, last = parse_ts(first_stop), parse_ts(last_stop)
        return {
            "jobs": jobs,
            "failed": failed,
            "enqueue_seconds": round(enq["seconds"], 3),
            "wall_seconds": round(last - t0, 3),
            "jobs_per_s": round(jobs / (last - t0), 1),
            "first_result_seconds": round(first_end - t0, 3),
            **steady(jobs, first_end, last),
        }


def steady(jobs: int, first_done: float, last_done: float) -> dict[str, float]:
    """Rate between the first and the last completion: start-up excluded, the same way for both queues."""
    span = last_done - first_done
    return {"steady_seconds": round(span, 3), "steady_jobs_per_s": round((jobs - 1) / span, 1)}


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant; the median is reported")
    parser.add_argument("--skip-djq", action="store_true", help="skip the django-q2 comparison")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()

    runs: dict[str, list[dict[str, Any]]] = {"ceiling": [], "ours": [], "djq": []}
    for n in range(args.repeat):  # interleaved, so drift in the machine hits every variant alike
        runs["ceiling"].append(run_ceiling(args.jobs))
        runs["ours"].append(run_ours(args.jobs))
        if not args.skip_djq:
            runs["djq"].append(run_djq(args.jobs))
        print(
            f"run {n + 1}/{args.repeat} (load {os.getloadavg()[0]:.2f}): "
            + ", ".join(f"{k} {v[-1]['jobs_per_s']} jobs/s" for k, v in runs.items() if v),
            flush=True,
        )

    summary: dict[str, Any] = {
        "ceiling_jobs_per_s": median_of(runs["ceiling"], "jobs_per_s"),
        "ours_jobs_per_s": median_of(runs["ours"], "jobs_per_s"),
        "ours_steady_jobs_per_s": median_of(runs["ours"], "steady_jobs_per_s"),
        "ours_startup_seconds": round(statistics.median(r["startup_seconds"] for r in runs["ours"]), 3),
        "ours_daemon_cpu_ms_per_job": round(statistics.median(r["daemon_cpu_ms_per_job"] for r in runs["ours"]), 2),
    }
    summary["ours_over_ceiling"] = round(summary["ours_jobs_per_s"] / summary["ceiling_jobs_per_s"], 3)
    # Each repetition's own ratio, its two runs a few seconds apart: this VM's spawn speed moves
    # within a run, by more than a repetition's ratio does (docs/performance.md, the summaries).
    summary["ours_over_ceiling_each_run"] = [
        round(ours["jobs_per_s"] / ceiling["jobs_per_s"], 3)
        for ours, ceiling in zip(runs["ours"], runs["ceiling"], strict=True)
    ]
    summary["ours_steady_over_ceiling"] = round(summary["ours_steady_jobs_per_s"] / summary["ceiling_jobs_per_s"], 3)
    if runs["djq"]:
        summary["djq_jobs_per_s"] = median_of(runs["djq"], "jobs_per_s")
        summary["djq_steady_jobs_per_s"] = median_of(runs["djq"], "steady_jobs_per_s")
        summary["ours_over_djq"] = round(summary["ours_jobs_per_s"] / summary["djq_jobs_per_s"], 2)
        summary["ours_steady_over_djq_steady"] = round(
            summary["ours_steady_jobs_per_s"] / summary["djq_steady_jobs_per_s"], 2
        )
    emit(
        {
            "benchmark": "throughput",
            "machine": machine(),
            "jobs": args.jobs,
            "threads": THREADS,
            "summary": summary,
            "runs": runs,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
