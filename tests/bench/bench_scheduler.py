"""Benchmark: the scheduler with 1,000 schedule entries (issue 4: tick cost <= 20 ms, fire time
p99 <= 1 s after due).

    .venv/bin/python tests/bench/bench_scheduler.py [--runs 3] [--window 120] [--postgres ADMIN_URL]
        [--skip-sqlite] [--history 20000] [--skip-ticks] [--skip-fire]
        [--scenarios spread,spread_workers,burst] [--out FILE]

Every run builds a fresh config directory and ledger: a fresh SQLite file, and with --postgres
ADMIN_URL also a fresh PostgreSQL database (CREATE DATABASE ductile_bench_sched_<pid>_<n>, dropped
afterwards). The entries belong to 20 aliases (`a00`..`a19`, `uses: nop`, a minimal `/bin/sh`
plugin) x 50 entries (`e00`..`e49`) = 1,000, all scheduling `poll`. Each alias sets
`max_outstanding_polls: 1000`: with the default (1) the poll guard would skip all but one of an
alias's 50 poll entries while their jobs wait, and a skipped run enqueues nothing to time.
No worker runs (every enqueued job stays queued) except in the spread_workers scenario.

1. Tick cost, in-process (a child process with Django set up on the run's ledger; `--skip-ticks`
   leaves it out). Entries: per alias 25 `every` (5m, 15m, 1h, 2h, daily in turn) and 25 `cron`
   (`M H * * *`, `M */2 * * *`, `M * * * 1-5` in turn), default policies otherwise. The clock is
   injected (`Scheduler(clock=...)`) and starts at 2026-11-23 09:01:30.5Z, a Monday; each tick
   advances it by 1 ms, so no entry becomes due by itself during the measurement. The ledger
   first gets `--history` succeeded scheduler jobs (20 per entry, each with its entry's dedupe
   key), as a day of retained `job_queue` would have.
   - `start(now)` on the empty ledger (1,000 rows created), then again on the same ledger (a
     restart: 1,000 unchanged rows), `--sync-repeat` times.
   - warm-up (not timed): the 500 new `every` entries run at once (an `every` entry counts from
     its last success); their jobs are marked succeeded and the next tick records them.
   - idle: 200 ticks with nothing due and every entry's last job recorded (the common case).
   - k due (k = 1, 10, 100: 40, 40, 10 trials; k = 1000: 3 trials): k random entries get
     `next_run_at` = now - 1 s (one UPDATE, not timed), then one timed `tick(now)`; each trial
     must enqueue k jobs (checked). Afterwards the bench marks those jobs succeeded (what a
     worker would do; not timed) and times the next tick, which records k successes.
   - idle, pending: 100 ticks with nothing due right after a k = 1000 tick whose jobs were left
     queued (workers down; the same query cost as last jobs that failed): `_record_outcomes`
     then reads all 1,000 entries and their jobs on every tick.
   - `sleep_for(now)` (the loop's other query, after every tick): 200 calls.
   - breakdown (`fire_breakdown_k100`): 10 more k = 100 trials with wall-clock timers around the
     steps of `Scheduler.fire` (take, gate reads, admit, enqueue_many, record_fired, next_run) and
     around every statement through Django's cursor inside `fire`; ms per fired entry.
   Wall (perf_counter) and CPU (thread_time) per call; a tick is split into `_record_outcomes`,
   the due query and the `fire` calls by timing around those methods in a subclass. On SQLite
   the statements of one idle tick and one k = 1 tick are captured with sqlite3's trace
   callback (`statements`).

2. Fire time after due, the real process (`--skip-fire` leaves it out). The 1,000 entries are
   `at` one-shots (default policies), and `manage.py runscheduler --config-dir DIR` runs
   as a subprocess (after the ledger was migrated by `_ledger_helper.py`):
   - spread: due instants drawn uniformly (seeded, millisecond resolution) from
     [T, T + --window s), T = 20 s after the config is written (the process starts in about
     2 s; the run is refused if it logged "started" after T);
   - spread_workers: the same, with `manage.py runworkers` (2 threads) running the jobs as they
     arrive (the system as deployed; the scheduler then shares the 2 cores with the plugins);
   - burst: all 1,000 due at the same instant T (what `every: 5m` on 1,000 entries does every
     5 minutes without jitter).
   Per job, `job_queue.created_at - due`, due being the `at` instant itself. `created_at` is the
   `now` the tick read when it began (Scheduler.run passes `self.clock()` to `tick`, and
   `fire`/`enqueue` use that value), so it does not include the time the tick spent on entries
   before this one. The enqueue's commit is therefore also measured: the JSON log line
   "schedule <plugin>:<id>: enqueued <job id>" is written right after `fire`'s transaction
   commits; its timestamp (milliseconds, truncated) - due is `commit - due`.
   All of these are the VM's wall clock, read by the scheduler process (timezone.now, the log
   record's time.time) and by this script (the due instants). Every 0.2 s during the window this
   script samples time.time() - time.monotonic(); the spread of that offset (`clock_offset_ms`)
   shows whether the wall clock was stepped or slewed during the run. Also recorded: the
   scheduler process's CPU time (utime + stime from /proc/PID/stat) over the window.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from _common import (
    NOP_SCRIPT,
    PYTHON,
    REPO,
    BenchConfig,
    cpu_seconds,
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

ALIASES = 20
PER_ALIAS = 50
LEAD_S = 20.0
TICK_T0 = dt.datetime(2026, 11, 23, 9, 1, 30, 500_000, tzinfo=dt.UTC)
EVERY = ["5m", "15m", "1h", "2h", "daily"]
CRON = ["{m} {h} * * *", "{m} */2 * * *", "{m} * * * 1-5"]


# -- config --------------------------------------------------------------------------------


class SchedConfig(BenchConfig):
    """BenchConfig plus the 20 aliases with their schedules, optionally on a PostgreSQL database."""

    def __init__(self, base: Path, schedules: dict[str, list[dict[str, Any]]], database_url: str | None):
        super().__init__(base, {"nop": NOP_SCRIPT})
        self.database_url = database_url
        path = self.path / "config.yaml"
        doc = yaml.safe_load(path.read_text())
        for alias, entries in schedules.items():
            doc["plugins"][alias] = {
                "uses": "nop",
                "config": {},
                "retry": {"max_attempts": 1},
                "max_outstanding_polls": 1000,
                "schedules": entries,
            }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def env(self) -> dict[str, str]:
        env = super().env()
        # The "enqueued" line this script times each commit by is written at debug (nothing else
        # the scheduler writes is).
        env["DUCTILE_LOG_LEVEL"] = "debug"
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        return env


def alias(n: int) -> str:
    return f"a{n:02d}"


def recurring_entries() -> dict[str, list[dict[str, Any]]]:
    out = {}
    for a in range(ALIASES):
        entries: list[dict[str, Any]] = []
        for i in range(PER_ALIAS):
            if i % 2 == 0:
                entries.append({"id": f"e{i:02d}", "every": EVERY[(i // 2) % len(EVERY)]})
            else:
                # Minutes 10..59 and hours 11..23: never due between 09:01:30 and 09:10 on Monday.
                minute, hour = 10 + (a * PER_ALIAS + i) % 50, 11 + (a + i) % 13
                cron = CRON[(i // 2) % len(CRON)].format(m=minute, h=hour)
                entries.append({"id": f"e{i:02d}", "cron": cron})
        out[alias(a)] = entries
    return out


def at_entries(dues: list[float]) -> dict[str, list[dict[str, Any]]]:
    """dues[n] (epoch seconds, millisecond resolution) for entry n = alias * 50 + index."""
    out: dict[str, list[dict[str, Any]]] = {}
    for n, due in enumerate(dues):
        text = dt.datetime.fromtimestamp(due, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        out.setdefault(alias(n // PER_ALIAS), []).append({"id": f"e{n % PER_ALIAS:02d}", "at": text})
    return out


@contextlib.contextmanager
def database(admin_url: str | None, name: str) -> Any:
    """None for SQLite; otherwise a fresh PostgreSQL database's URL, dropped on exit."""
    if not admin_url:
        yield None
        return
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stats(values: list[float], digits: int = 2) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), digits),
        "p99": round(percentile(values, 99), digits),
        "max": round(max(values), digits),
        "min": round(min(values), digits),
    }


# -- 1. tick cost, in a child process ------------------------------------------------------------


def tick_child(config_dir: str, history: int, sync_repeat: int, seed: int) -> dict[str, Any]:
    from gateway.bootstrap import prepare_process

    prepare_process(config_dir)
    import django

    django.setup()
    from django.db import connection

    from gateway.daemon.scheduler import Scheduler
    from gateway.runtime import RUNTIME
    from gateway.storage.database import ensure_schema
    from ledger.models import Job, JobSpec, ScheduleEntry
    from ledger.states import JobStatus
    from ledger.submitters import Submitter
    from ledger.writes.transaction import writing

    ensure_schema()
    if RUNTIME.error:
        raise RUNTIME.error
    rng = random.Random(seed)
    now = TICK_T0
    keys = [(alias(a), f"e{i:02d}") for a in range(ALIASES) for i in range(PER_ALIAS)]

    # A day of history: succeeded scheduler jobs carrying the entries' dedupe keys.
    t0 = time.perf_counter()
    with writing():
        for n in range(history):
            plugin, sid = keys[n % len(keys)]
            Job.objects.enqueue(
                JobSpec(
                    plugin=plugin,
                    command="poll",
                    submitter=Submitter.SCHEDULER,
                    dedupe_key=f"{plugin}:poll:{sid}",
                    dedupe_checked=True,
                    max_attempts=1,
                ),
                default_dedupe_ttl=86400,
                now=now - dt.timedelta(seconds=86400 * (n + 1) / (history + 1)),
            )
    Job.objects.filter(status=JobStatus.QUEUED).update(status=JobStatus.SUCCEEDED, completed_at=now)
    history_s = time.perf_counter() - t0

    parts: dict[str, float] = {}

    class TimedScheduler(Scheduler):
        def _record_outcomes(self, now: dt.datetime) -> None:
            w = time.perf_counter()
            super()._record_outcomes(now)
            parts["record_successes"] = parts.get("record_successes", 0.0) + time.perf_counter() - w

        def fire(self, entries: Any, now: dt.datetime) -> Any:
            w = time.perf_counter()
            result = super().fire(entries, now)
            parts["fire"] = parts.get("fire", 0.0) + time.perf_counter() - w
            return result

    clock = {"now": now}
    scheduler = TimedScheduler(RUNTIME, clock=lambda: clock["now"], install_signals=False)

    def timed(fn: Any) -> tuple[Any, float, float]:
        w, c = time.perf_counter(), time.thread_time()
        value = fn()
        return value, (time.perf_counter() - w) * 1e3, (time.thread_time() - c) * 1e3

    def advance() -> dt.datetime:
        clock["now"] += dt.timedelta(milliseconds=1)
        return clock["now"]

    out: dict[str, Any] = {"history_jobs": history, "history_s": round(history_s, 1)}
    _, wall, cpu = timed(lambda: scheduler.start(clock["now"]))
    assert ScheduleEntry.objects.count() == 1000
    out["start_first_ms"] = {"wall": round(wall, 1), "cpu": round(cpu, 1)}
    restarts = [timed(lambda: scheduler.start(clock["now"]))[1:] for _ in range(sync_repeat)]
    out["start_restart_ms"] = {"wall": stats([w for w, _ in restarts], 1), "cpu": stats([c for _, c in restarts], 1)}

    def tick_series(count: int) -> dict[str, Any]:
        walls, cpus, split = [], [], {"record_successes": [], "fire": [], "due_query_and_rest": []}
        for _ in range(count):
            parts.clear()
            fired, wall, cpu = timed(lambda: scheduler.tick(advance()))
            assert not fired, fired
            walls.append(wall)
            cpus.append(cpu)
            rec = parts.get("record_successes", 0.0) * 1e3
            split["record_successes"].append(rec)
            split["due_query_and_rest"].append(wall - rec)
        return {
            "wall": stats(walls),
            "cpu": stats(cpus),
            "split_wall_p50": {k: round(percentile(v, 50), 3) for k, v in split.items() if v},
        }

    pk_of = {(p, s): pk for pk, p, s in ScheduleEntry.objects.values_list("pk", "plugin", "schedule_id")}

    def complete(job_ids: list[str]) -> None:
        Job.objects.filter(pk__in=job_ids).update(status=JobStatus.SUCCEEDED, completed_at=clock["now"])

    # Warm-up: a new `every` entry runs at once; its run succeeds, so it is next due an interval on.
    complete([j for f in scheduler.tick(advance()) for j in f.job_ids])
    scheduler.tick(advance())
    out["idle_tick_ms"] = tick_series(200)

    def make_due(rows: list[tuple[str, str]]) -> None:
        pks = [pk_of[key] for key in rows]
        ScheduleEntry.objects.filter(pk__in=pks).update(next_run_at=clock["now"] - dt.timedelta(seconds=1))

    def due_trials(k: int, trials: int, *, leave_queued: bool = False) -> dict[str, Any]:
        walls, cpus, per_entry, recs, fires, rests, success_ticks = [], [], [], [], [], [], []
        job_ids: list[str] = []
        for _ in range(trials):
            make_due(rng.sample(keys, k) if k < len(keys) else keys)
            parts.clear()
            fired, wall, cpu = timed(lambda: scheduler.tick(advance()))
            job_ids = [j for f in fired for j in f.job_ids]
            assert len(fired) == k and len(job_ids) == k, (k, len(fired), [f for f in fired if f.skipped][:3])
            walls.append(wall)
            cpus.append(cpu)
            per_entry.append(wall / k)
            rec, fire = parts.get("record_successes", 0.0) * 1e3, parts.get("fire", 0.0) * 1e3
            recs.append(rec)
            fires.append(fire)
            rests.append(wall - rec - fire)
            if leave_queued:
                break
            complete(job_ids)
            parts.clear()
            fired, wall, _ = timed(lambda: scheduler.tick(advance()))
            assert not fired
            success_ticks.append(wall)
        return {
            "k": k,
            "trials": len(walls),
            "tick_wall": stats(walls),
            "tick_cpu": stats(cpus),
            "per_fired_entry_wall": stats(per_entry, 3),
            "split_wall_p50": {
                "record_successes": round(percentile(recs, 50), 3),
                "due_query_and_rest": round(percentile(rests, 50), 3),
                "fire_calls": round(percentile(fires, 50), 3),
            },
            "next_tick_recording_k_successes_wall": stats(success_ticks),
        }, job_ids

    out["due_tick_ms"] = []
    for k, trials in ((1, 40), (10, 40), (100, 10), (1000, 3)):
        result, _ = due_trials(k, trials)
        out["due_tick_ms"].append(result)

    # Workers down (or the last runs failed): every entry's last job is not succeeded.
    result, queued = due_trials(1000, 1, leave_queued=True)
    out["idle_tick_pending_1000_ms"] = tick_series(100)
    complete(queued)
    scheduler.tick(advance())

    sleeps = [timed(lambda: scheduler.sleep_for(clock["now"]))[1:] for _ in range(200)]
    out["sleep_for_ms"] = {"wall": stats([w for w, _ in sleeps], 3), "cpu": stats([c for _, c in sleeps], 3)}

    out["fire_breakdown_k100"] = fire_breakdown(scheduler, make_due, complete, advance, rng, keys, trials=10)

    if connection.vendor == "sqlite":
        out["statements"] = {"idle_tick": [], "k1_tick": []}
        raw = connection.connection

        def capture(name: str, fn: Any) -> None:
            raw.set_trace_callback(lambda s: out["statements"][name].append(" ".join(s.split())[:200]))
            try:
                fn()
            finally:
                raw.set_trace_callback(None)

        capture("idle_tick", lambda: scheduler.tick(advance()))
        make_due([keys[7]])
        capture("k1_tick", lambda: scheduler.tick(advance()))
    out["job_queue_rows_at_end"] = Job.objects.count()
    out["backend"] = connection.vendor
    return out


def fire_breakdown(
    scheduler: Any, make_due: Any, complete: Any, advance: Any, rng: Any, keys: Any, trials: int
) -> dict[str, Any]:
    """Where one fired entry's time goes: k = 100 ticks with wall-clock timers around the steps of
    `Scheduler.fire` (bench-only wrappers installed for this series, removed afterwards) and
    around every statement Django's cursor executes (`connection.execute_wrapper`)."""
    from django.db import connection

    import gateway.daemon.scheduler as loop_module

    spent: dict[str, float] = {}

    def wrap(name: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            w = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - w

        return timed

    db = {"n": 0, "s": 0.0, "in_fire": False}

    def on_execute(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        w = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if db["in_fire"]:
                db["n"] += 1
                db["s"] += time.perf_counter() - w

    def fire_flagged(*args: Any, **kwargs: Any) -> Any:
        db["in_fire"] = True
        try:
            return saved[(cls, "fire")](*args, **kwargs)
        finally:
            db["in_fire"] = False

    from ledger.models.breakers import CircuitBreakerQuerySet
    from ledger.models.jobs import JobQuerySet
    from ledger.models.schedules import ScheduleEntryQuerySet

    cls = type(scheduler)
    # (owner, attribute, label): the steps of a batched `fire` (gateway/daemon/scheduler.py).
    steps = [
        (loop_module, "next_run", "next_run (timing.py)"),
        (ScheduleEntryQuerySet, "take", "ScheduleEntry take (compare-and-set UPDATE ... RETURNING per group)"),
        (ScheduleEntryQuerySet, "record_fired", "ScheduleEntry record_fired (last_job_id UPDATEs, executemany)"),
        (CircuitBreakerQuerySet, "locked_for", "CircuitBreaker locked_for (one SELECT FOR UPDATE)"),
        (loop_module._Gates, "admit", "_Gates.admit (in-memory gate and overlap rules)"),
        (JobQuerySet, "enqueue_many", "Job enqueue_many (2 batched INSERTs)"),
    ]
    saved = {(owner, name): getattr(owner, name) for owner, name, _ in steps}
    saved[(loop_module._Gates, "__init__")] = loop_module._Gates.__init__
    saved[(cls, "fire")] = cls.fire
    for owner, name, label in steps:
        setattr(owner, name, wrap(label, saved[(owner, name)]))
    loop_module._Gates.__init__ = wrap(
        "_Gates() (breakers, in-flight keys, poll counts: 3 SELECTs)", saved[(loop_module._Gates, "__init__")]
    )
    cls.fire = wrap("fire", fire_flagged)
    fired_total = 0
    try:
        with connection.execute_wrapper(on_execute):
            for _ in range(trials):
                make_due(rng.sample(keys, 100))
                fired = scheduler.tick(advance())
                fired_total += len(fired)
                complete([j for f in fired for j in f.job_ids])
                scheduler.tick(advance())
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)
    total = spent.pop("fire")
    per = {name: round(value / fired_total * 1e3, 3) for name, value in sorted(spent.items(), key=lambda kv: -kv[1])}
    per["rest of fire (BEGIN/COMMIT, on_commit wake-up, log line, bookkeeping)"] = round(
        (total - sum(spent.values())) / fired_total * 1e3, 3
    )
    return {
        "fired": fired_total,
        "fire_ms_per_entry": round(total / fired_total * 1e3, 3),
        "steps_ms_per_entry": per,
        # Statements through Django's cursor inside fire (not the job/transition INSERTs, which
        # ledger/sql.py runs on the DB-API cursor) and the time spent executing them.
        "django_statements_per_entry": round(db["n"] / fired_total, 2),
        "django_statement_ms_per_entry": round(db["s"] / fired_total * 1e3, 3),
    }


def run_ticks(base: Path, database_url: str | None, history: int, sync_repeat: int, seed: int) -> dict[str, Any]:
    config = SchedConfig(base, recurring_entries(), database_url)
    proc = subprocess.run(
        [
            PYTHON,
            __file__,
            "--tick-child",
            str(config.path),
            "--history",
            str(history),
            "--sync-repeat",
            str(sync_repeat),
            "--seed",
            str(seed),
        ],
        capture_output=True,
        text=True,
        env=config.env(),
        cwd=REPO,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"tick child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- 2. fire time after due, the real process ----------------------------------------------------


def run_fire(base: Path, database_url: str | None, scenario: str, window: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    t_due = round(time.time() + LEAD_S, 3)
    if scenario.startswith("spread"):
        dues = sorted(round(t_due + rng.random() * window, 3) for _ in range(ALIASES * PER_ALIAS))
        rng.shuffle(dues)  # entries of one alias are not consecutive in time
    else:
        dues = [t_due] * (ALIASES * PER_ALIAS)
    due_of = {(alias(n // PER_ALIAS), f"e{n % PER_ALIAS:02d}"): due for n, due in enumerate(dues)}
    config = SchedConfig(base, at_entries(dues), database_url)
    helper(config, "enqueue", "0", "nop")  # migrate the fresh ledger before the scheduler starts
    workers = None
    if scenario == "spread_workers":
        workers_log = base / "runworkers.log"
        workers = start_workers(config, workers_log)
        wait_until(lambda: b"runworkers started" in workers_log.read_bytes(), timeout=60, what="runworkers start")
    log_path = base / "runscheduler.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [PYTHON, str(REPO / "manage.py"), "runscheduler", "--config-dir", str(config.path)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=config.env(),
        cwd=REPO,
        start_new_session=True,
    )
    proc._bench_log = log  # type: ignore[attr-defined]
    offsets: list[float] = []
    try:
        wait_until(lambda: b"runscheduler started" in log_path.read_bytes(), timeout=60, what="runscheduler start")
        started_wall = time.time()
        if started_wall >= t_due:
            raise RuntimeError(f"runscheduler started {started_wall - t_due:.1f} s after the first due time")
        cpu_before = cpu_seconds(proc.pid)
        deadline = time.monotonic() + (max(dues) - time.time()) + 120
        while time.monotonic() < deadline:
            offsets.append(time.time() - time.monotonic())
            if time.time() > max(dues) + 0.5 and log_path.read_bytes().count(b": enqueued ") >= len(dues):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"runscheduler exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(0.5)
        cpu_window = cpu_seconds(proc.pid) - cpu_before
    finally:
        rc = stop_process(proc)
        if workers is not None:
            stop_process(workers)
    commits: dict[str, float] = {}
    started_log = None
    for line in log_path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            msg = rec.get("message", "")
            if msg.startswith("runscheduler started"):
                started_log = rec["timestamp"]
            if msg.startswith("schedule ") and ": enqueued " in msg:
                job_id = msg.rsplit(" ", 1)[1]
                commits[job_id] = parse_ts(rec["timestamp"].rstrip("Z"))
    jobs = fetch_jobs(config, database_url)
    if len(jobs) != len(dues):
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"{len(jobs)} jobs enqueued for {len(dues)} entries; log tail:\n{tail}")
    created, commit = [], []
    for job_id, dedupe_key, created_at, _ in jobs:
        plugin, _, sid = dedupe_key.split(":")
        due = due_of[(plugin, sid)]
        created.append((created_at - due) * 1e3)
        commit.append((commits[job_id] - due) * 1e3)
    span = (max(offsets) - min(offsets)) * 1e3 if offsets else float("nan")
    return {
        "scenario": scenario,
        "entries": len(dues),
        "window_s": window if scenario.startswith("spread") else 0,
        "workers": workers is not None,
        "jobs_succeeded": sum(1 for *_, status in jobs if status == "succeeded"),
        "distinct_due_instants": len(set(dues)),
        "jobs": len(jobs),
        "early_fires": sum(1 for v in created if v < 0),
        "created_minus_due_ms": stats(created),
        "commit_minus_due_ms": stats(commit),
        "over_1s": {"created": sum(1 for v in created if v > 1000), "commit": sum(1 for v in commit if v > 1000)},
        "scheduler_cpu_s_in_window": round(cpu_window, 2),
        "started_log": started_log,
        "lead_s_before_first_due": round(t_due - started_wall, 1),
        "clock_offset_ms": {"samples": len(offsets), "span": round(span, 3)},
        "scheduler_exit_code": rc,
    }


def fetch_jobs(config: SchedConfig, database_url: str | None) -> list[tuple[str, str, float, str]]:
    sql = "SELECT id, dedupe_key, created_at, status FROM job_queue WHERE submitted_by = 'scheduler'"
    if database_url:
        import psycopg

        with psycopg.connect(database_url) as conn:
            return [(i, k, c.timestamp(), st) for i, k, c, st in conn.execute(sql).fetchall()]
    return [(i, k, parse_ts(c), st) for i, k, c, st in sqlite_query(config.db_path, sql)]


# -- main ------------------------------------------------------------------------------------


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for backend in sorted({r["backend"] for r in runs}):
        mine = [r for r in runs if r["backend"] == backend]
        ticks = [r["ticks"] for r in mine if r.get("ticks")]
        s: dict[str, Any] = {}
        if ticks:
            s["idle_tick_p50_p99_ms"] = [
                [t["idle_tick_ms"]["wall"]["p50"], t["idle_tick_ms"]["wall"]["p99"]] for t in ticks
            ]
            for k_index, k in enumerate((1, 10, 100, 1000)):
                s[f"k{k}_tick_p50_p99_ms"] = [
                    [t["due_tick_ms"][k_index]["tick_wall"]["p50"], t["due_tick_ms"][k_index]["tick_wall"]["p99"]]
                    for t in ticks
                ]
            s["idle_pending_1000_p50_ms"] = [t["idle_tick_pending_1000_ms"]["wall"]["p50"] for t in ticks]
        for scenario in ("spread", "spread_workers", "burst"):
            fires = [f for r in mine for f in r.get("fire", []) if f["scenario"] == scenario]
            if fires:
                s[f"{scenario}_created_p50_p99_max_ms"] = [
                    [f["created_minus_due_ms"][q] for q in ("p50", "p99", "max")] for f in fires
                ]
                s[f"{scenario}_commit_p50_p99_max_ms"] = [
                    [f["commit_minus_due_ms"][q] for q in ("p50", "p99", "max")] for f in fires
                ]
        out[backend] = s
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window", type=float, default=120.0, help="spread of the due instants, seconds")
    parser.add_argument("--postgres", metavar="ADMIN_URL", help="also run on fresh databases of this server")
    parser.add_argument("--history", type=int, default=20000)
    parser.add_argument("--sync-repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--skip-sqlite", action="store_true", help="with --postgres: PostgreSQL only")
    parser.add_argument("--skip-ticks", action="store_true")
    parser.add_argument("--skip-fire", action="store_true")
    parser.add_argument("--scenarios", default="spread,spread_workers,burst")
    parser.add_argument("--tick-child", metavar="CONFIG_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    if args.tick_child:
        print(json.dumps(tick_child(args.tick_child, args.history, args.sync_repeat, args.seed)))
        return
    backends = ([] if args.skip_sqlite else [None]) + ([args.postgres] if args.postgres else [])
    runs = []
    for n in range(args.runs):
        for admin in backends:
            backend = "postgresql" if admin else "sqlite"
            run: dict[str, Any] = {"run": n + 1, "backend": backend}
            if not args.skip_ticks:
                with temp_dir("sched") as base, database(admin, f"ductile_bench_sched_{os.getpid()}_{n}_t") as url:
                    run["ticks"] = run_ticks(base, url, args.history, args.sync_repeat, args.seed + n)
            if not args.skip_fire:
                run["fire"] = []
                for scenario in args.scenarios.split(","):
                    with (
                        temp_dir("sched") as base,
                        database(admin, f"ductile_bench_sched_{os.getpid()}_{n}_{scenario}") as url,
                    ):
                        run["fire"].append(run_fire(base, url, scenario, args.window, args.seed + n))
            print(json.dumps({"run": n + 1, "backend": backend, "done": True}), file=sys.stderr, flush=True)
            runs.append(run)
    emit(
        {
            "benchmark": "scheduler",
            "machine": machine(),
            "postgres": bool(args.postgres),
            "summary": summarize(runs),
            "runs": runs,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
