"""Moving a SQLite ledger to PostgreSQL: `system migrate-ledger` against Django's dumpdata/loaddata.

    .venv/bin/python tests/bench/bench_ledger_move.py --postgres ADMIN_URL [--jobs 50000] [--out FILE]

Builds a ledger of `--jobs` jobs with their history as bench_console.py builds its own (3
transitions, a job_log and a stopwatch row per finished job, pipeline contexts, events, facts),
then moves it into a fresh PostgreSQL database twice, each on a database of its own (created and
dropped on the server ADMIN_URL names, e.g. the one `scripts/pg-server start` prints):

- `manage.py system migrate-ledger --to URL` (gateway/operations/ledger_move.py): migrations,
  then COPY of every table in one transaction;
- what `system restore` does with a SQLite snapshot into PostgreSQL: `dumpdata ledger --format
  jsonl` of the SQLite file, then `migrate` and `loaddata` on the target.

Wall time of each, end to end (the processes' starts included), and the rows moved.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from _common import NOP_SCRIPT, BenchConfig, emit, machine, temp_dir
from bench_console import PLUGINS, generate

REPO = Path(__file__).resolve().parents[2]


def manage(config: BenchConfig, database: str | None, *args: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DUCTILE_DB_PATH")}
    if database:
        env["DATABASE_URL"] = database
    env["TMPDIR"] = str(config.tmp)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args, "--config-dir", str(config.path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.perf_counter() - started


def fresh_database(admin: str) -> str:
    name = f"ductile_move_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{admin.rpartition('/')[0]}/{name}"


def drop(admin: str, url: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {url.rpartition('/')[2]} WITH (FORCE)")


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    config = BenchConfig(base, {f"plugin-{i:02d}": NOP_SCRIPT for i in range(PLUGINS)})
    manage(config, None, "migrate", "--noinput")
    ledger = generate(config.db_path, args.jobs)
    print(f"ledger: {ledger}", flush=True)
    results: dict[str, Any] = {"jobs": args.jobs, "ledger": ledger, "machine": machine()}
    target = fresh_database(args.postgres)
    try:
        seconds = manage(config, None, "system", "migrate-ledger", "--to", target)
        results["migrate_ledger_s"] = round(seconds, 1)
        print(f"system migrate-ledger: {seconds:.1f} s", flush=True)
    finally:
        drop(args.postgres, target)
    target = fresh_database(args.postgres)
    export = base / "ledger.jsonl"
    try:
        dumped = manage(
            config, f"sqlite:///{config.db_path}", "dumpdata", "ledger", "--format", "jsonl", "--output", str(export)
        )
        migrated = manage(config, target, "migrate", "--noinput")
        loaded = manage(config, target, "loaddata", str(export))
        results["dumpdata_loaddata_s"] = {
            "dumpdata": round(dumped, 1),
            "migrate": round(migrated, 1),
            "loaddata": round(loaded, 1),
            "total": round(dumped + migrated + loaded, 1),
        }
        print(f"dumpdata + migrate + loaddata: {results['dumpdata_loaddata_s']}", flush=True)
    finally:
        drop(args.postgres, target)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", required=True, metavar="ADMIN_URL", help="a server to make databases on")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    with temp_dir("ledger-move") as base:
        emit(run(args, base), args.out)


if __name__ == "__main__":
    main()
