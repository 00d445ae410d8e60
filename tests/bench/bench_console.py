"""The audit console on a big ledger: server time per page with 1,000,000 jobs in SQLite.

    .venv/bin/python tests/bench/bench_console.py [--jobs 1000000] [--requests 20] [--keep DIR] [--out FILE]

Builds a ledger the way a long-running gateway would have one (30 days of jobs: 85 % succeeded,
the rest failed, dead, timed out, with the last 0.3 % queued or running; 30 % of them steps of
3-step pipelines with their event_context rows, 12 pipelines of 25,000 runs and one of 20; three
transitions, one job_log and one stopwatch row per finished job, an event_log row for every
third job, a fact for every twentieth; 20 jobs fail with a rare error) with
INSERT … SELECT over a recursive counter, then asks Django's test client, in this process, for
each page as an auditor: the index, the job list unfiltered and with each filter, searches, and
job pages (a pipeline step in a tree, a failed job). Each page is asked for `--requests` times
after two untimed warm-ups, a different job each time for the job pages; p50/p95/max in ms of
wall time around the request (what the server spends on it: Django, the ORM, SQLite, the
templates). Target: p95 <= 300 ms for the list (default and each filter) and a job page.

No ANALYZE is run: the gateway never runs it, so SQLite plans these queries without statistics,
as it does in production. `--keep DIR` keeps (or reuses) the generated ledger in DIR.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import NOP_SCRIPT, BenchConfig, emit, machine, percentile, temp_dir

DAYS = 30
PLUGINS = 20
PIPELINES = 12
PASSWORD = "correct horse battery"
RARE_ERROR = "disk quota exceeded on /var/spool/ductile"


def job_id(n: int) -> str:
    """A UUID-shaped id, unique per n, spread over the key space like uuid4's (a multiplicative
    hash first), so id-prefix search and primary-key lookups behave as on a real ledger."""
    spread = (n * 2654435761) % 2**32
    return f"{spread:08x}-{(n >> 16) & 0xFFFF:04x}-4{n & 0xFFF:03x}-8{(n >> 12) & 0xFFF:03x}-{n:012x}"


def context_id(n: int) -> str:
    return f"c{n:07x}-0000-4000-8000-{(n * 40503) % 2**48:012x}"


def log_id(n: int) -> str:
    return f"1{n:07x}-0000-4000-8000-{(n * 2246822519) % 2**48:012x}"


def stamp(epoch: float) -> str:
    """A DateTimeField as Django stores it in SQLite: naive UTC text, microseconds."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


# The columns every generated job shares; `t` is its creation time (epoch seconds), `r` a
# per-job number in 0..999 that decides its fate, `live` the newest 0.3 % (queued or running).
JOBS_SQL = """
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < :jobs),
j AS (
  SELECT n, :start + n * :step AS t, (n * 7919) % 1000 AS r, n > :jobs * 0.997 AS live,
         n % 10 < 3 AS piped FROM seq
),
s AS (
  SELECT *, CASE
      WHEN live THEN CASE WHEN n % 3 = 0 THEN 'running' ELSE 'queued' END
      WHEN n % 50000 = 1234 THEN 'failed'
      WHEN r < 850 THEN 'succeeded' WHEN r < 900 THEN 'failed'
      WHEN r < 930 THEN 'dead' ELSE 'timed_out' END AS status FROM j
)
INSERT INTO job_queue (id, plugin, command, payload, status, attempt, max_attempts, submitted_by,
    dedupe_key, created_at, started_at, completed_at, next_retry_at, last_error, parent_job_id,
    source_event_id, event_context_id, route_depth, event, claimed_by, lease_until)
SELECT jid(n), printf('plugin-%02d', n % :plugins), CASE WHEN piped THEN 'handle' ELSE 'poll' END,
    printf('{"n": %d, "mode": "ok", "note": "bench row %d"}', n, n), status,
    CASE WHEN status = 'dead' THEN 4 ELSE 1 END, 4,
    CASE WHEN n % 997 = 0 THEN 'admin:alice'
         WHEN piped THEN CASE WHEN n % 10 = 0 THEN 'api' ELSE 'route' END
         WHEN n % 10 < 6 THEN 'scheduler' WHEN n % 10 < 9 THEN 'api' ELSE 'cli' END,
    CASE WHEN n % 10 = 5 THEN 'key-' || n END,
    ts(t), CASE WHEN status = 'queued' THEN NULL ELSE ts(t + 0.05) END,
    CASE WHEN status IN ('queued', 'running') THEN NULL ELSE ts(t + 0.05 + (n % 37) / 10.0) END,
    NULL,
    CASE WHEN n % 50000 = 1234 THEN :rare
         WHEN status = 'timed_out' THEN 'timed out after 30s (process group killed)'
         WHEN status IN ('failed', 'dead')
           THEN printf('simulated failure %d: connection refused by host-%d', n % 50, n % 7)
    END,
    CASE WHEN piped AND n % 10 > 0 THEN jid(n - 1) END, NULL,
    CASE WHEN piped THEN cid(n) END, CASE WHEN piped THEN n % 10 + 1 ELSE 0 END,
    printf('{"type": "bench.trigger", "payload": {"n": %d}, "source": "api", "event_id": "%s"}', n, jid(n)),
    CASE WHEN status = 'running' THEN 'bench:1:w' END,
    CASE WHEN status = 'running' THEN ts(:now + 60) END
FROM s
"""

CONTEXTS_SQL = """
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < :jobs)
INSERT INTO event_context (id, parent_id, pipeline_name, step_id, accumulated_json, created_at)
SELECT cid(n), CASE WHEN n % 10 > 0 THEN cid(n - 1) END,
    CASE WHEN (n / 10) % 5000 = 17 THEN 'pipeline-rare' ELSE printf('pipeline-%02d', (n / 10) % :pipelines) END,
    'step-' || (n % 10),
    printf('{"origin": {"user": "u%d"}, "ductile": {"pipeline": "pipeline-%02d", "step": "step-%d"}}',
           (n / 10) % 100, (n / 10) % :pipelines, n % 10),
    ts(:start + n * :step)
FROM seq WHERE n % 10 < 3
"""

HISTORY_SQL = [
    # Three transitions per finished job, two per running, one per queued.
    """INSERT INTO job_transitions (job_id, from_status, to_status, reason, worker, attempt, created_at)
       SELECT id, NULL, 'queued', 'enqueued by ' || submitted_by, NULL, 1, created_at FROM job_queue""",
    """INSERT INTO job_transitions (job_id, from_status, to_status, reason, worker, attempt, created_at)
       SELECT id, 'queued', 'running', 'claimed by bench:1:w', 'bench:1:w', attempt, started_at
       FROM job_queue WHERE started_at IS NOT NULL""",
    """INSERT INTO job_transitions (job_id, from_status, to_status, reason, worker, attempt, created_at)
       SELECT id, 'running', status, COALESCE(last_error, 'plugin returned ok'), 'bench:1:w', attempt, completed_at
       FROM job_queue WHERE completed_at IS NOT NULL""",
    """INSERT INTO job_log (id, job_id, plugin, command, status, result, attempt, submitted_by, created_at,
           completed_at, last_error, stderr, parent_job_id, source_event_id)
       SELECT lid(rowid), id, plugin, command, status,
           '{"status": "ok", "result": "done", "state_updates": {"seen": ' || rowid || '}}', attempt,
           submitted_by, created_at, completed_at, last_error,
           CASE WHEN last_error IS NOT NULL THEN 'Traceback (most recent call last):' || char(10)
                || '  File "run.py", line 12, in main' || char(10) || 'ConnectionRefusedError: ' || last_error END,
           parent_job_id, NULL
       FROM job_queue WHERE completed_at IS NOT NULL""",
    """INSERT INTO job_stopwatch (job_id, plugin, command, step_name, attempt, enter_wall_ns, exit_wall_ns, dur_ns,
           runtime_pre_ns, runtime_post_ns, status, subs_json, created_at)
       SELECT id, plugin, command, NULL, attempt, 0, 0, 5000000 + (rowid % 97) * 1000000, 400000, 600000,
           CASE WHEN status = 'succeeded' THEN 'ok' WHEN status = 'timed_out' THEN 'timeout' ELSE 'err' END,
           '[]', completed_at
       FROM job_queue WHERE completed_at IS NOT NULL""",
    """INSERT INTO event_log (event_id, type, source, job_id, payload, created_at)
       SELECT NULL, 'bench.emitted', plugin, id, '{"from": "' || id || '"}', created_at
       FROM job_queue WHERE rowid % 3 = 0""",
    """INSERT INTO plugin_facts (seq, plugin_name, fact_type, job_id, command, fact_json, created_at)
       SELECT rowid, plugin, 'bench.snapshot', id, command, '{"count": ' || rowid || '}', completed_at
       FROM job_queue WHERE rowid % 20 = 0 AND completed_at IS NOT NULL""",
]


def generate(db: Path, jobs: int) -> dict[str, Any]:
    """Fill the migrated ledger at `db` with `jobs` jobs and their history (its own connection:
    no fsync, a big page cache)."""
    started = time.perf_counter()
    now = time.time()
    params = {"jobs": jobs, "start": now - DAYS * 86400, "step": DAYS * 86400 / jobs, "now": now}
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -400000")
    for name, fn in (("jid", job_id), ("cid", context_id), ("lid", log_id), ("ts", stamp)):
        conn.create_function(name, 1, fn, deterministic=True)
    conn.execute("BEGIN")
    conn.execute(JOBS_SQL, {**params, "plugins": PLUGINS, "rare": RARE_ERROR})
    conn.execute(CONTEXTS_SQL, {**params, "pipelines": PIPELINES})
    for statement in HISTORY_SQL:
        conn.execute(statement)
    conn.execute(
        "WITH RECURSIVE g(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM g WHERE k < :plugins - 1)"
        " INSERT INTO circuit_breakers (plugin, command, state, failure_count, opened_at, last_failure_at,"
        " last_job_id, updated_at) SELECT printf('plugin-%02d', k), 'poll',"
        " CASE WHEN k % 7 = 0 THEN 'open' ELSE 'closed' END, k % 3, NULL, NULL, NULL, :now FROM g",
        {"plugins": PLUGINS, "now": stamp(now)},
    )
    conn.execute("COMMIT")
    counts = {
        table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        for table in ("job_queue", "job_transitions", "job_log", "job_stopwatch", "event_context", "event_log")
    }
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"seconds": round(time.perf_counter() - started, 1), "rows": counts}


def scenarios(jobs: int, expect: dict[str, str]) -> dict[str, list[str]]:
    """Each page the benchmark asks for, by name: one URL, or one per request (job pages); fills
    `expect` with text a page must contain."""
    lists = {
        "list": "",
        "list status=failed": "?status=failed",
        "list status=queued": "?status=queued",
        "list failed or dead, 24 h (index link)": "?status=problem&created=24h",
        "list plugin": "?plugin=plugin-07",
        "list pipeline": "?pipeline=pipeline-03",
        "list pipeline (rare)": "?pipeline=pipeline-rare",
        "list submitted_by=scheduler": "?submitted_by=scheduler",
        "list submitted_by=admin:alice (rare)": "?submitted_by=admin%3Aalice",
        "list created=1h": "?created=1h",
        "list created=24h": "?created=24h",
        "list status=dead & plugin": "?status=dead&plugin=plugin-03",
        "list page 50": f"?p={min(50, jobs // 100)}",
        "search id prefix": f"?q={job_id(jobs // 2)[:8]}",
        "search whole id": f"?q={job_id(jobs // 3)}",
        "search dedupe key": f"?q=key-{(jobs // 2) // 10 * 10 + 5}",
        "search error text (common)": "?q=connection+refused",
        "search error text (rare)": "?q=disk+quota",
    }
    out = {name: [f"/admin/ledger/job/{query}"] for name, query in lists.items()}
    # The searches must find what they look for (the full id is each row's title).
    expect["search id prefix"] = f'title="{job_id(jobs // 2)}"'
    expect["search whole id"] = f'title="{job_id(jobs // 3)}"'
    expect["search dedupe key"] = f'title="{job_id((jobs // 2) // 10 * 10 + 5)}"'
    expect["search error text (rare)"] = "disk quota exceeded"
    out["index"] = ["/admin/"]
    # A pipeline's third step (a tree of three, baggage from two hops) and a failed job.
    steps = [n - n % 10 + 2 for n in range(jobs // 5, int(jobs * 0.99), jobs // 50)][:40]
    failed = [n for n in range(jobs // 7, int(jobs * 0.99), 17) if 850 <= (n * 7919) % 1000 < 900 and n % 10 >= 3][:40]
    out["job page: pipeline step"] = [f"/admin/ledger/job/{job_id(n)}/change/" for n in steps]
    out["job page: failed job"] = [f"/admin/ledger/job/{job_id(n)}/change/" for n in failed]
    for table in ("jobtransition", "joblog", "eventrecord", "circuitbreaker"):
        out[f"{table} list"] = [f"/admin/ledger/{table}/"]
    return out


def measure(client: Any, urls: list[str], requests: int, expect: str | None) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for url in urls[:2]:  # warm-up, untimed
        assert client.get(url).status_code == 200, url
    times = []
    with CaptureQueriesContext(connection) as queries:
        response = client.get(urls[0])
    # Read now: the next request's start clears the connection's query log.
    captured = list(queries.captured_queries)
    assert response.status_code == 200, urls[0]
    assert expect is None or expect in response.content.decode(), f"{urls[0]}: {expect!r} not on the page"
    for i in range(requests):
        url = urls[i % len(urls)]
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return {
        "p50_ms": round(percentile(times, 50), 1),
        "p95_ms": round(percentile(times, 95), 1),
        "max_ms": round(max(times), 1),
        "queries": len(captured),
        "slowest_query_ms": round(max((float(q["time"]) for q in captured), default=0) * 1000, 1),
    }


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    config = BenchConfig(base, {f"plugin-{i:02d}": NOP_SCRIPT for i in range(PLUGINS)})
    for name in ("DATABASE_URL", "DUCTILE_DB_PATH", "DUCTILE_CONFIG_DIR", "DJANGO_SETTINGS_MODULE"):
        os.environ.pop(name, None)
    from gateway.bootstrap import prepare_process

    prepare_process(str(config.path))
    import django

    django.setup()
    from django.http import HttpRequest
    from django.test import Client

    from gateway.operations.accounts import save_account
    from gateway.storage.database import ensure_schema

    reused = config.db_path.exists()
    ensure_schema()
    generated = {"reused": True} if reused else generate(config.db_path, args.jobs)
    from django.contrib.auth.models import User

    if not User.objects.filter(username="ada").exists():
        save_account("ada", "auditor", PASSWORD)
    client = Client()
    assert client.login(request=HttpRequest(), username="ada", password=PASSWORD)
    results = {}
    expect: dict[str, str] = {}
    for name, urls in scenarios(args.jobs, expect).items():
        results[name] = measure(client, urls, args.requests, expect.get(name))
        print(f"{name:45} p50 {results[name]['p50_ms']:7.1f}  p95 {results[name]['p95_ms']:7.1f} ms", flush=True)
    return {
        "jobs": args.jobs,
        "requests_per_page": args.requests,
        "ledger": {**generated, "file_mib": round(config.db_path.stat().st_size / 2**20)},
        "pages": results,
        "target_p95_ms": 300,
        "met": all(
            r["p95_ms"] <= 300 for name, r in results.items() if name.startswith(("list", "job page", "search"))
        ),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page")
    parser.add_argument("--keep", help="generate the ledger in (or reuse it from) this directory")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    if args.keep:
        base = Path(args.keep)
        if not (base / "config").exists():
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir(parents=True)
        else:
            # BenchConfig writes a fresh config directory; the ledger beside it is what is reused.
            shutil.rmtree(base / "config")
            shutil.rmtree(base / "plugins", ignore_errors=True)
            shutil.rmtree(base / "tmp", ignore_errors=True)
        result = run(args, base)
    else:
        with temp_dir("console") as base:
            result = run(args, base)
    emit({"benchmark": "console", "machine": machine(), **result}, args.out)


if __name__ == "__main__":
    main()
