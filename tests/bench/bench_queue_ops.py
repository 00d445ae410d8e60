"""Diagnostic: what one job costs the worker in the ledger, operation by operation (no plugin).

    .venv/bin/python tests/bench/bench_queue_ops.py [--jobs 2000] [--out FILE]

In one process and one thread, on a fresh SQLite (WAL) ledger with --jobs queued jobs, each job
goes through the calls a worker thread makes around a plugin run (gateway/execution/workers.py and
gateway/execution/dispatch.py): the read-only pre-check, claim_next, PluginState.current, and
record_outcome with the same AttemptOutcome shape the Executor builds. Wall and CPU (thread
time) per call are reported as medians in microseconds: under the GIL, CPU per job is what caps
throughput of a single daemon process.

`raw_sql_claim_us` is a yardstick, not the gateway's code: the same claim (per-plugin cap,
oldest due job, compare-and-set to running, transition row) as hand-written SQL through the same
Django connection, to show how much of claim_next is ORM overhead rather than SQLite work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from _common import NOP_SCRIPT, BenchConfig, emit, machine, temp_dir

from ledger.submitters import Submitter


def timed(samples: dict[str, list[tuple[int, int]]], name: str, fn: Callable[[], Any]) -> Any:
    w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    value = fn()
    samples.setdefault(name, []).append((time.perf_counter_ns() - w0, time.thread_time_ns() - c0))
    return value


def run(jobs: int) -> dict[str, Any]:
    with temp_dir("ops") as base:
        config = BenchConfig(base, {"nop": NOP_SCRIPT})
        for name in ("DATABASE_URL", "DUCTILE_DB_PATH", "DUCTILE_CONFIG_DIR", "DJANGO_SETTINGS_MODULE"):
            os.environ.pop(name, None)
        from gateway.bootstrap import prepare_process

        prepare_process(str(config.path))
        import django

        django.setup()
        from django.db import connection, transaction
        from django.utils import timezone

        from gateway.storage.database import ensure_schema
        from ledger.models import AttemptOutcome, Job, JobSpec, PluginState
        from ledger.states import JobStatus

        ensure_schema()
        samples: dict[str, list[tuple[int, int]]] = {}
        for _ in range(jobs):
            timed(
                samples,
                "enqueue",
                lambda: Job.objects.enqueue(
                    JobSpec(plugin="nop", command="poll", submitter=Submitter.CLI), default_dedupe_ttl=86400
                ),
            )
        caps, worker = {"nop": 2}, "bench:1:abc"
        response = '{"status":"ok","result":"x"}'
        for _ in range(jobs):
            now = timezone.now()
            timed(samples, "precheck_exists", lambda now=now: Job.objects.look(list(caps), now))
            job = timed(
                samples,
                "claim_next",
                lambda now=now: Job.objects.claim_next(worker_id=worker, caps=caps, lease_ttl=60, now=now),
            )
            timed(samples, "plugin_state_current", lambda: PluginState.current("nop"))
            outcome = AttemptOutcome(
                status=JobStatus.SUCCEEDED,
                response_text=response,
                stderr="",
                backoff_base=30.0,
                stopwatch={
                    "command": "poll",
                    "enter_wall_ns": 1,
                    "exit_wall_ns": 2,
                    "dur_ns": 1,
                    "runtime_pre_ns": 1,
                    "status": "ok",
                    "subs_json": [],
                    "runtime_post_ns": 1,
                },
            )
            timed(
                samples,
                "record_outcome",
                lambda job=job, outcome=outcome: job.record_outcome(outcome, worker=worker, default_dedupe_ttl=86400),
            )

        # The yardstick: the same claim as three SQL statements in one IMMEDIATE transaction.
        for _ in range(jobs):
            Job.objects.enqueue(
                JobSpec(plugin="nop", command="poll", submitter=Submitter.CLI), default_dedupe_ttl=86400
            )

        def raw_claim() -> Any:
            now = timezone.now()
            stamp = now.strftime("%Y-%m-%d %H:%M:%S.%f")
            lease = (now + timedelta(seconds=60)).strftime("%Y-%m-%d %H:%M:%S.%f")
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("SELECT plugin, COUNT(*) FROM job_queue WHERE status = 'running' GROUP BY plugin")
                running = dict(cur.fetchall())
                open_plugins = [p for p, cap in caps.items() if running.get(p, 0) < cap]
                marks = ",".join("%s" for _ in open_plugins)
                cur.execute(
                    "UPDATE job_queue SET status = 'running', claimed_by = %s, lease_until = %s, started_at = %s,"
                    " next_retry_at = NULL WHERE id = (SELECT q.id FROM job_queue q WHERE q.status = 'queued'"
                    " AND (q.next_retry_at IS NULL OR q.next_retry_at <= %s)"
                    f" AND q.plugin IN ({marks}) AND (q.dedupe_key IS NULL OR NOT EXISTS (SELECT 1 FROM job_queue r"
                    " WHERE r.status = 'running' AND r.dedupe_key = q.dedupe_key AND r.plugin = q.plugin"
                    " AND r.command = q.command)) ORDER BY q.created_at, q.id LIMIT 1) AND status = 'queued'"
                    " RETURNING id, plugin, command, payload, event, attempt, max_attempts, submitted_by,"
                    " dedupe_key, created_at, parent_job_id, source_event_id, event_context_id",
                    [worker, lease, stamp, stamp, *open_plugins],
                )
                row = cur.fetchone()
                cur.execute(
                    "INSERT INTO job_transitions (job_id, from_status, to_status, reason, worker, attempt, created_at)"
                    " VALUES (%s, 'queued', 'running', %s, %s, %s, %s)",
                    [row[0], f"claimed by {worker}", worker, row[5], stamp],
                )
            return row

        for _ in range(jobs):
            row = timed(samples, "raw_sql_claim", raw_claim)
            with connection.cursor() as cur:  # untimed: finish it so the cap never fills
                cur.execute("UPDATE job_queue SET status = 'succeeded' WHERE id = %s", [row[0]])

        out: dict[str, Any] = {"jobs": jobs}
        for name, values in samples.items():
            out[f"{name}_us"] = {
                "wall": round(statistics.median(v[0] for v in values) / 1000, 1),
                "cpu": round(statistics.median(v[1] for v in values) / 1000, 1),
            }
        per_job = ("precheck_exists", "claim_next", "plugin_state_current", "record_outcome")
        out["worker_ledger_cpu_us_per_job"] = round(sum(out[f"{n}_us"]["cpu"] for n in per_job), 1)
        out["implied_max_jobs_per_s_one_gil"] = round(1e6 / out["worker_ledger_cpu_us_per_job"], 1)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    emit({"benchmark": "queue_ops", "machine": machine(), **run(args.jobs)}, args.out)


if __name__ == "__main__":
    main()
