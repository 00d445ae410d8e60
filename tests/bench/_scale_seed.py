"""Seeding a big ledger fast, for bench_ledger_scale.py: one set of INSERT … SELECT statements over
a counter (SQLite's recursive CTE, PostgreSQL's generate_series), the same rows on both backends.

The schema is the app's own (its migrations run first); the secondary indexes of the tables filled
here are dropped before the bulk insert and created again after it from the exact DDL the
migrations left (`sqlite_master.sql`, `pg_indexes.indexdef`): the same indexes, built once by a
sort instead of 10 million random inserts into each.

The shape (`SHAPE`): jobs spread over `DAYS` days, `PLUGINS` plugins; 85 % succeeded, the rest
failed, dead or timed out; 30 % pipeline steps (a root and its child and grandchild, with their
event_context rows); the newest jobs are live: a third running (claimed by a node that is not
this one, lease far ahead), the rest queued waiting for a retry an hour ahead (so the benchmark's
own jobs are not stuck behind them, as a real backlog would make them). Every finished job has its
job_log line; the newest third of the span (`HISTORY_FRACTION`) also has its transitions, its
attempt, its stopwatch row and, for every third job, an event_log row.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from bench_console import context_id, job_id, log_id, stamp

DAYS = 60
PLUGINS = 50
PIPELINES = 12
HISTORY_FRACTION = 1 / 3
RARE_ERROR = "disk quota exceeded on /var/spool/ductile"
ELSEWHERE = "node-b.example:4242:w1"  # the running jobs' worker: another node, alive by its lease


def live_count(jobs: int) -> int:
    """A few thousand live jobs on a big ledger; 1 % of a small one."""
    return min(3000, max(1, jobs // 100))


def plugin_name(k: int) -> str:
    return f"plugin-{k:02d}"


# `{seq}` is the counter n = 1..:jobs; functions: bench_jid, bench_cid, bench_lid, bench_ts,
# bench_plugin (Python functions on SQLite, SQL functions on PostgreSQL: the same text).
JOBS_SQL = """
WITH j AS (
  SELECT n, :start + n * :step AS t, (n * 7919) % 1000 AS r, n > :live_from AS live,
         n % 10 < 3 AS piped FROM {seq}
),
s AS (
  SELECT j.*, CASE
      WHEN live THEN CASE WHEN n % 3 = 0 THEN 'running' ELSE 'queued' END
      WHEN n % 50000 = 1234 THEN 'failed'
      WHEN r < 850 THEN 'succeeded' WHEN r < 900 THEN 'failed'
      WHEN r < 930 THEN 'dead' ELSE 'timed_out' END AS status FROM j
)
INSERT INTO job_queue (id, plugin, command, payload, status, attempt, max_attempts, submitted_by,
    dedupe_key, created_at, started_at, completed_at, next_retry_at, last_error, parent_job_id,
    source_event_id, event_context_id, route_depth, event, claimed_by, lease_until)
SELECT bench_jid(n), bench_plugin(n % :plugins), CASE WHEN piped THEN 'handle' ELSE 'poll' END,
    {json}('{"n": ' || n || ', "mode": "ok", "note": "bench row ' || n || '"}'), status,
    CASE WHEN status = 'dead' THEN 4 WHEN status = 'queued' THEN 2 ELSE 1 END, 4,
    CASE WHEN n % 997 = 0 THEN 'admin:alice'
         WHEN piped THEN CASE WHEN n % 10 = 0 THEN 'api' ELSE 'route' END
         WHEN n % 10 < 6 THEN 'scheduler' WHEN n % 10 < 9 THEN 'api' ELSE 'cli' END,
    CASE WHEN n % 10 = 5 THEN 'key-' || n END,
    bench_ts(t), CASE WHEN status = 'queued' THEN NULL ELSE bench_ts(t + 0.05) END,
    CASE WHEN status IN ('queued', 'running') THEN NULL ELSE bench_ts(t + 0.05 + (n % 37) / 10.0) END,
    CASE WHEN status = 'queued' THEN bench_ts(:now + 3600) END,
    CASE WHEN n % 50000 = 1234 THEN :rare
         WHEN status = 'timed_out' THEN 'timed out after 30s (process group killed)'
         WHEN status IN ('failed', 'dead', 'queued')
           THEN 'simulated failure ' || (n % 50) || ': connection refused by host-' || (n % 7)
    END,
    CASE WHEN piped AND n % 10 > 0 THEN bench_jid(n - 1) END, NULL,
    CASE WHEN piped THEN bench_cid(n) END, CASE WHEN piped THEN n % 10 + 1 ELSE 0 END,
    {json}('{"type": "bench.trigger", "payload": {"n": ' || n || '}, "source": "api", "event_id": "'
           || bench_jid(n) || '"}'),
    CASE WHEN status = 'running' THEN :elsewhere END,
    CASE WHEN status = 'running' THEN bench_ts(:now + 7 * 86400) END
FROM s
"""

CONTEXTS_SQL = """
INSERT INTO event_context (id, parent_id, pipeline_name, step_id, accumulated_json, created_at)
SELECT bench_cid(n), CASE WHEN n % 10 > 0 THEN bench_cid(n - 1) END,
    CASE WHEN (n / 10) % 5000 = 17 THEN 'pipeline-rare' ELSE 'pipeline-' || ((n / 10) % :pipelines) END,
    'step-' || (n % 10),
    {json}('{"origin": {"user": "u' || ((n / 10) % 100) || '"}, "ductile": {"pipeline": "pipeline-'
           || ((n / 10) % :pipelines) || '", "step": "step-' || (n % 10) || '"}}'),
    bench_ts(:start + n * :step)
FROM {seq} WHERE n % 10 < 3
"""

# job_queue's rows in insertion order are n's order (rowid on SQLite, a fresh table's heap order on
# PostgreSQL); `recent` is the newest third, whose history the retention of job_log still keeps.
HISTORY_SQL = [
    """INSERT INTO job_log (id, job_id, plugin, command, status, result, attempt, submitted_by, created_at,
           completed_at, last_error, stderr, parent_job_id, source_event_id)
       SELECT bench_lid(n), id, plugin, command, status,
           '{"status": "ok", "result": "done", "state_updates": {"seen": ' || n || '}}', attempt,
           submitted_by, created_at, completed_at, last_error,
           CASE WHEN last_error IS NOT NULL THEN 'Traceback (most recent call last):
  File "run.py", line 12, in main
ConnectionRefusedError: ' || last_error END,
           parent_job_id, NULL
       FROM {jobs_n} WHERE completed_at IS NOT NULL""",
    # A job's transitions in the order a gateway writes them, job after job: retention's scan in
    # id order (ledger.models.retention) meets the expired rows first, as on a real ledger.
    """INSERT INTO job_transitions (job_id, from_status, to_status, reason, worker, attempt, created_at)
       SELECT id, CASE k WHEN 0 THEN NULL WHEN 1 THEN 'queued' ELSE 'running' END,
           CASE k WHEN 0 THEN 'queued' WHEN 1 THEN 'running' ELSE status END,
           CASE k WHEN 0 THEN 'enqueued by ' || submitted_by WHEN 1 THEN 'claimed by bench:1:w'
                ELSE COALESCE(last_error, 'plugin returned ok') END,
           CASE WHEN k > 0 THEN 'bench:1:w' END, CASE WHEN k = 0 THEN 1 ELSE attempt END,
           CASE k WHEN 0 THEN created_at WHEN 1 THEN started_at ELSE completed_at END
       FROM {jobs_n} CROSS JOIN (SELECT 0 AS k UNION ALL SELECT 1 UNION ALL SELECT 2) AS kinds
       WHERE n > :recent_from AND (k = 0 OR (k = 1 AND started_at IS NOT NULL) OR (k = 2 AND completed_at IS NOT NULL))
       ORDER BY n, k""",
    """INSERT INTO job_attempts (job_id, attempt, status, worker, started_at, completed_at, error)
       SELECT id, attempt, CASE WHEN status = 'dead' THEN 'failed' ELSE status END, 'bench:1:w',
           started_at, completed_at, last_error
       FROM {jobs_n} WHERE n > :recent_from AND completed_at IS NOT NULL""",
    """INSERT INTO job_stopwatch (job_id, plugin, command, step_name, attempt, enter_wall_ns, exit_wall_ns, dur_ns,
           runtime_pre_ns, runtime_post_ns, status, subs_json, created_at)
       SELECT id, plugin, command, NULL, attempt, 0, 0, 5000000 + (n % 97) * 1000000, 400000, 600000,
           CASE WHEN status = 'succeeded' THEN 'ok' WHEN status = 'timed_out' THEN 'timeout' ELSE 'err' END,
           {json}('[]'), completed_at
       FROM {jobs_n} WHERE n > :recent_from AND completed_at IS NOT NULL""",
    """INSERT INTO event_log (event_id, type, source, job_id, payload, created_at)
       SELECT NULL, 'bench.emitted', plugin, id, {json}('{"from": "' || id || '"}'), created_at
       FROM {jobs_n} WHERE n > :recent_from AND n % 3 = 0""",
]

TABLES = ("job_queue", "event_context", "job_log", "job_transitions", "job_attempts", "job_stopwatch", "event_log")

# The PostgreSQL twins of the Python functions SQLite is given (bench_console's id shapes).
PG_FUNCTIONS = """
CREATE FUNCTION bench_hex(v bigint, width int) RETURNS text IMMUTABLE LANGUAGE sql
    AS $$ SELECT lpad(to_hex(v), width, '0') $$;
CREATE FUNCTION bench_jid(n bigint) RETURNS text IMMUTABLE LANGUAGE sql AS $$
    SELECT bench_hex((n * 2654435761) % 4294967296, 8) || '-' || bench_hex((n >> 16) & 65535, 4)
        || '-4' || bench_hex(n & 4095, 3) || '-8' || bench_hex((n >> 12) & 4095, 3) || '-' || bench_hex(n, 12) $$;
CREATE FUNCTION bench_cid(n bigint) RETURNS text IMMUTABLE LANGUAGE sql AS $$
    SELECT 'c' || bench_hex(n, 7) || '-0000-4000-8000-' || bench_hex((n * 40503) % 281474976710656, 12) $$;
CREATE FUNCTION bench_lid(n bigint) RETURNS text IMMUTABLE LANGUAGE sql AS $$
    SELECT '1' || bench_hex(n, 7) || '-0000-4000-8000-' || bench_hex((n * 2246822519) % 281474976710656, 12) $$;
CREATE FUNCTION bench_ts(t double precision) RETURNS timestamptz IMMUTABLE LANGUAGE sql
    AS $$ SELECT to_timestamp(t) $$;
CREATE FUNCTION bench_json(t text) RETURNS jsonb IMMUTABLE LANGUAGE sql AS $$ SELECT t::jsonb $$;
CREATE FUNCTION bench_plugin(k bigint) RETURNS text IMMUTABLE LANGUAGE sql
    AS $$ SELECT 'plugin-' || lpad(k::text, 2, '0') $$;
"""
PG_DROP = "DROP FUNCTION bench_json, bench_jid, bench_cid, bench_lid, bench_ts, bench_plugin, bench_hex"


def _bind(text: str, params: dict[str, Any], quote: Callable[[str], str]) -> str:
    """`:name` placeholders replaced by literals (numbers as they are, strings quoted): one text
    for both drivers, whose parameter styles differ."""

    def literal(match: re.Match[str]) -> str:
        value = params[match[1]]
        return quote(value) if isinstance(value, str) else repr(value)

    return re.sub(r"(?<![:\w]):([a-z_]+)\b", literal, text)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def statements(jobs: int, now: float, dialect: str) -> list[tuple[str, str]]:
    """(label, SQL) in the order they run."""
    live = live_count(jobs)
    params: dict[str, Any] = {
        "jobs": jobs,
        "start": now - DAYS * 86400,
        "step": DAYS * 86400 / jobs,
        "now": now,
        "plugins": PLUGINS,
        "pipelines": PIPELINES,
        "live_from": jobs - live,
        "recent_from": int(jobs * (1 - HISTORY_FRACTION)),
        "rare": RARE_ERROR,
        "elsewhere": ELSEWHERE,
    }
    if dialect == "sqlite":
        seq = "(WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < :jobs) SELECT n FROM c)"
        fmt = {"seq": f"{seq} AS seq", "json": "", "jobs_n": "(SELECT rowid AS n, * FROM job_queue)"}
    else:
        fmt = {
            "seq": "generate_series(1::bigint, :jobs) AS n",
            "json": "bench_json",
            # No rowid: n is read back from the id's last twelve hex digits (bench_jid).
            "jobs_n": "(SELECT ('x' || lpad(right(id, 12), 16, '0'))::bit(64)::bigint AS n, * FROM job_queue) AS q",
        }
    out = [("job_queue", JOBS_SQL), ("event_context", CONTEXTS_SQL)]
    out += [(f"history {i}", text) for i, text in enumerate(HISTORY_SQL)]
    bound = []
    for label, text in out:
        for key, value in fmt.items():
            text = text.replace("{" + key + "}", value)
        bound.append((label, _bind(text, params, _quote)))
    return bound


def _one(row: tuple[Any, ...] | None) -> Any:
    assert row is not None
    return row[0]


def _timed(log: dict[str, float], label: str, run: Callable[[], Any]) -> None:
    started = time.perf_counter()
    run()
    log[label] = round(time.perf_counter() - started, 1)
    print(f"  seed {label}: {log[label]} s", flush=True)


def seed_sqlite(db: str, jobs: int) -> dict[str, Any]:
    """Fill the migrated SQLite ledger at `db` (its own connection: no fsync, a big page cache)."""
    started = time.perf_counter()
    conn = sqlite3.connect(db, isolation_level=None)
    # No journal while seeding: in WAL mode the one transaction went to the WAL whole (12.7 GB at
    # 10 M jobs, then copied again by the checkpoint) and every index build read the table through
    # it. The gateway's WAL mode is set back before the connection closes.
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -2000000")
    conn.execute("PRAGMA temp_store = MEMORY")
    for name, fn in (("bench_jid", job_id), ("bench_cid", context_id), ("bench_lid", log_id), ("bench_ts", stamp)):
        conn.create_function(name, 1, fn, deterministic=True)
    conn.create_function("bench_plugin", 1, plugin_name, deterministic=True)
    steps: dict[str, float] = {}
    marks = ",".join("?" * len(TABLES))
    indexes = conn.execute(
        f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({marks})",
        TABLES,
    ).fetchall()
    conn.execute("BEGIN")
    _fill(conn.execute, indexes, statements(jobs, time.time(), "sqlite"), steps)
    conn.execute("COMMIT")
    counts = {table: _one(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()) for table in TABLES}
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    return {"seconds": round(time.perf_counter() - started, 1), "steps": steps, "rows": counts}


def _fill(
    execute: Callable[[str], Any], indexes: list[Any], texts: Iterable[tuple[str, str]], steps: dict[str, float]
) -> None:
    """Inside the caller's transaction: the app's indexes dropped, every statement run (each
    timed into `steps`), then the indexes made again from their own DDL (timed as one step)."""
    for name, _ in indexes:
        execute(f'DROP INDEX "{name}"')
    for label, text in texts:
        _timed(steps, label, functools.partial(execute, text))

    def build() -> None:
        for _, ddl in indexes:
            execute(ddl)

    _timed(steps, "indexes", build)


def seed_postgres(url: str, jobs: int) -> dict[str, Any]:
    """Fill the migrated PostgreSQL ledger at `url`, then VACUUM ANALYZE it (what autovacuum does
    to a table of that size soon after it grows: the planner's statistics, the visibility map)."""
    import psycopg

    started = time.perf_counter()
    steps: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET work_mem = '256MB'")
        indexes = conn.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = current_schema()"
            " AND i.tablename = ANY(%s) AND NOT EXISTS (SELECT 1 FROM pg_constraint c"
            " WHERE c.conname = i.indexname)",
            [list(TABLES)],
        ).fetchall()
        with conn.transaction():
            conn.execute(PG_FUNCTIONS)
            _fill(conn.execute, indexes, statements(jobs, time.time(), "postgres"), steps)
            conn.execute(PG_DROP)
        _timed(steps, "vacuum analyze", lambda: conn.execute("VACUUM ANALYZE"))
        counts = {table: _one(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()) for table in TABLES}
        size = _one(conn.execute("SELECT pg_database_size(current_database())").fetchone())
    return {"seconds": round(time.perf_counter() - started, 1), "steps": steps, "rows": counts, "bytes": size}
