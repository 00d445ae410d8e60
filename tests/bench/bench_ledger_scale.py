"""Issue 38: a ledger of 10 million jobs, on SQLite and on PostgreSQL, against a fresh one.

    .venv/bin/python tests/bench/bench_ledger_scale.py [--jobs 10000000] [--fresh-jobs 10000]
        [--backends sqlite,postgres] [--postgres ADMIN_URL] [--base DIR] [--out FILE]

For each backend, a fresh (small) ledger first and then the big one, each seeded by
`_scale_seed.py` after the real migrations (bulk INSERT … SELECT, the app's own indexes rebuilt
from their DDL), then served by the real `system start` (API, workers, scheduler; housekeeping off:
its prune is measured on its own, last). On each:

- **enqueue → start**: `--latency-jobs` (200) jobs POSTed to the API one at a time, 50 ms apart
  (the intake, as a client uses it), to a plugin of their own; the workers of `system start` claim
  and run them. Latency = the job's `started_at` - its `created_at` (both written by the gateway),
  and the POST's round trip as the client saw it.
- **console**: an `auditor` logs in over HTTP (the login form, its CSRF token, the session cookie)
  and asks for the job list (default, `?plugin=`, `?status=failed`, both) and the page of a
  pipeline root with a child, a grandchild and its job_log line, `--requests` (30) times each
  after two untimed; wall time per request as the client sees it. Target p95 <= 300 ms.
- **`job logs`**: the console script as a real process (`ductile job logs --json`): for one job
  (`--job-id`), for a filtered query (`--plugin --status failed`) and unfiltered; `--cli-runs` (10)
  each, wall time.
- **retention prune**: what the hourly housekeeping runs (gateway.operations.housekeeping.prune), in
  a process of its own, with both retentions set so that the oldest 10 % of the jobs (1 M of 10 M)
  and their history have expired (`--prune-fraction`); meanwhile jobs are POSTed 20 a second as above: its duration,
  what it deleted, and enqueue → start and the POST's round trip during it against before it.

The big ledger is made in `--base` (default /work/bench-10m) and deleted at the end unless
`--keep`; `--reuse` takes the one a `--keep` run left (the prune, which deletes 10 % of it, then
runs against what is left). PostgreSQL: `--postgres ADMIN_URL` (e.g. what `scripts/pg-server
start` prints), where a database per ledger is created and dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import http.cookiejar
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import (
    NOP_SCRIPT,
    PYTHON,
    REPO,
    BenchConfig,
    emit,
    machine,
    parse_ts,
    percentile,
    speed_probe,
    stop_process,
    wait_until,
)
from _scale_seed import DAYS, PLUGINS, live_count, seed_postgres, seed_sqlite
from bench_console import job_id

TOKEN = "bench-scale-token"
PASSWORD = "correct horse battery"
DUCTILE = str(Path(PYTHON).parent / "ductile")
TARGET_PAGE_P95_MS = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def summary(values: list[float], *pcts: int) -> dict[str, float]:
    out = {f"p{p}_ms": round(percentile(values, p), 1) for p in pcts}
    out["max_ms"] = round(max(values), 1) if values else float("nan")
    out["n"] = len(values)
    return out


class Ledger:
    """One ledger under test: its config directory, its database (a SQLite file, or a PostgreSQL
    database of its own), and short reads of it from this process."""

    def __init__(self, base: Path, backend: str, admin_url: str | None):
        self.base = base
        self.backend = backend
        self.port = free_port()
        api = {
            "listen": f"127.0.0.1:{self.port}",
            "auth": {"tokens": [{"name": "bench", "token": TOKEN, "scopes": ["*"]}]},
        }
        # Retention far beyond the seeded span: nothing expires until the prune phase says so.
        service = {"job_queue_retention": "3650d", "job_log_retention": "3650d"}
        plugins = {f"plugin-{k:02d}": NOP_SCRIPT for k in range(PLUGINS)} | {"probe": NOP_SCRIPT}
        if (base / "config").exists():
            shutil.rmtree(base / "config")
            shutil.rmtree(base / "plugins", ignore_errors=True)
            shutil.rmtree(base / "tmp", ignore_errors=True)
        self.config = BenchConfig(base, plugins, extra={"api": api})
        self._patch_service(service)
        self.url: str | None = None
        if backend == "postgres":
            assert admin_url, "--postgres ADMIN_URL is needed for the postgres backend"
            self.url = f"{admin_url.rpartition('/')[0]}/ductile_scale_{base.name.replace('-', '_')}"

    def _patch_service(self, service: dict[str, str]) -> None:
        import yaml

        path = self.config.path / "config.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["service"].update(service)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def env(self) -> dict[str, str]:
        env = self.config.env()
        if self.url:
            env["DATABASE_URL"] = self.url
        return env

    def manage(self, *args: str, stdin: str | None = None, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [PYTHON, str(REPO / "manage.py"), *args, "--config-dir", str(self.config.path)],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=REPO,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        return proc

    def server(self) -> tuple[str, str]:
        """(the server's URL without a database, this ledger's database name)."""
        assert self.url
        server, _, name = self.url.rpartition("/")
        return server, name

    def exists(self) -> bool:
        if self.backend == "sqlite":
            return self.config.db_path.exists()
        import psycopg

        server, name = self.server()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None

    def create(self, jobs: int) -> dict[str, Any]:
        """Migrations (the app's schema, as `system start` would make it), then the seed."""
        if self.backend == "postgres":
            import psycopg

            server, name = self.server()
            with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
        started = time.perf_counter()
        self.manage("migrate", "--noinput")
        migrated = round(time.perf_counter() - started, 1)
        if self.backend == "sqlite":
            seeded = seed_sqlite(str(self.config.db_path), jobs)
        else:
            assert self.url
            seeded = seed_postgres(self.url, jobs)
        return {"migrate_s": migrated, **seeded}

    def drop(self) -> None:
        if self.backend == "postgres":
            import psycopg

            server, name = self.server()
            with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        shutil.rmtree(self.base, ignore_errors=True)

    def size_bytes(self) -> int:
        if self.backend == "sqlite":
            return sum(p.stat().st_size for p in self.config.db_path.parent.glob("ductile.db*"))
        return int(self.query("SELECT pg_database_size(current_database())")[0][0])

    def query(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """`%s` placeholders on both backends."""
        if self.backend == "sqlite":
            import sqlite3

            lite = sqlite3.connect(f"file:{self.config.db_path}?mode=ro", uri=True, timeout=60)
            try:
                return lite.execute(sql.replace("%s", "?"), tuple(params)).fetchall()
            finally:
                lite.close()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:  # type: ignore[arg-type]
            return conn.execute(sql, list(params)).fetchall()  # type: ignore[call-overload, no-any-return]

    def epoch(self, value: Any) -> float:
        return value.timestamp() if isinstance(value, datetime) else parse_ts(value)

    def explain(self, sql: str, params: list[Any]) -> list[str]:
        if self.backend == "sqlite":
            return [row[-1] for row in self.query("EXPLAIN QUERY PLAN " + sql, params)]
        return [row[0] for row in self.query("EXPLAIN " + sql, params)]


@contextlib.contextmanager
def system_start(ledger: Ledger) -> Iterator[subprocess.Popen[bytes]]:
    """The gateway as a user runs it, on this ledger; its log to a file (a pipe nobody reads blocks)."""
    log_path = ledger.base / "system-start.log"
    log = open(log_path, "ab")  # noqa: SIM115 - closed by stop_process
    proc = subprocess.Popen(
        [
            PYTHON,
            str(REPO / "manage.py"),
            "system",
            "start",
            "--no-housekeeping",
            "--config-dir",
            str(ledger.config.path),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=ledger.env(),
        cwd=REPO,
        start_new_session=True,
    )
    proc._bench_log = log  # type: ignore[attr-defined]
    try:
        wait_until(lambda: _healthy(ledger.port) or proc.poll() is not None, 300, 0.2, "the API to answer /healthz")
        if proc.poll() is not None:
            raise RuntimeError(f"system start exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        yield proc
    finally:
        stop_process(proc, timeout=60)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def post_job(port: int, plugin: str) -> tuple[str, float]:
    """One enqueue through the API: (job id, round trip in ms)."""
    body = json.dumps({"payload": {"bench": True}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/plugin/{plugin}/poll",
        data=body,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    return answer["job_id"], (time.perf_counter() - started) * 1000


def trickle(port: int, count: int | None, interval: float, stop: threading.Event | None = None) -> dict[str, Any]:
    """Jobs POSTed `interval` s apart (open loop: a slow answer does not delay the next send's
    schedule more than it must), `count` of them or until `stop` is set."""
    ids: list[str] = []
    trips: list[float] = []
    next_at = time.monotonic()
    while (count is None or len(ids) < count) and not (stop and stop.is_set()):
        job, trip = post_job(port, "probe")
        ids.append(job)
        trips.append(trip)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    return {"ids": ids, "trips": trips}


def start_latencies(ledger: Ledger, ids: list[str], timeout: float = 300) -> list[float]:
    """started_at - created_at (ms) of each job, once every one of them has started."""
    rows: list[tuple[Any, ...]] = []

    def all_started() -> bool:
        nonlocal rows
        rows = []
        for chunk in range(0, len(ids), 500):
            part = ids[chunk : chunk + 500]
            marks = ",".join(["%s"] * len(part))
            rows += ledger.query(f"SELECT created_at, started_at FROM job_queue WHERE id IN ({marks})", part)
        return len(rows) == len(ids) and all(r[1] is not None for r in rows)

    wait_until(all_started, timeout, 0.5, f"{len(ids)} jobs to start")
    return [(ledger.epoch(started) - ledger.epoch(created)) * 1000 for created, started in rows]


def measure_latency(ledger: Ledger, jobs: int) -> dict[str, Any]:
    sent = trickle(ledger.port, jobs, 0.05)
    waits = start_latencies(ledger, sent["ids"])
    return {"enqueue_to_start": summary(waits, 50, 99), "post_round_trip": summary(sent["trips"], 50, 99)}


class Session:
    """A console session over HTTP: cookies, the login form's CSRF token, redirects not followed."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.cookies = http.cookiejar.CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies), NoRedirect)

    def get(self, path: str, form: dict[str, str] | None = None) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers={"Referer": self.base + path})
        try:
            with self.opener.open(request, timeout=120) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def log_in(self, username: str, password: str) -> None:
        _, page = self.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, page[:500]
        code, _ = self.get(
            "/admin/login/", {"csrfmiddlewaretoken": token[1], "username": username, "password": password}
        )
        assert code == 302, f"login answered {code}"
        assert self.get("/admin/")[0] == 200, "the session does not open the console"


def pipeline_roots(jobs: int, count: int) -> list[int]:
    """Finished pipeline roots (n % 10 == 0, each with a child and a grandchild) across the ledger."""
    live_from = jobs - live_count(jobs)
    span = range(jobs // 2, live_from - 10, max(10, (live_from - jobs // 2) // count // 10 * 10))
    return [n - n % 10 + 10 for n in span][:count]


def measure_console(ledger: Ledger, jobs: int, requests: int) -> dict[str, Any]:
    session = Session(ledger.port)
    session.log_in("ada", PASSWORD)
    pages: dict[str, tuple[list[str], str | None]] = {
        "job list": (["/admin/ledger/job/"], None),
        "job list ?plugin=": (["/admin/ledger/job/?plugin=plugin-07"], None),
        "job list ?status=failed": (["/admin/ledger/job/?status=failed"], None),
        "job list ?status=failed&plugin=": (["/admin/ledger/job/?status=failed&plugin=plugin-07"], None),
    }
    roots = pipeline_roots(jobs, 10)
    pages["job page (children, logs)"] = (
        [f"/admin/ledger/job/{job_id(n)}/change/" for n in roots],
        job_id(roots[0] + 1)[:8],  # the child is on its parent's page
    )
    out: dict[str, Any] = {}
    for name, (urls, expect) in pages.items():
        for url in urls[:2]:
            code, body = session.get(url)
            assert code == 200, (url, code, body[:300])
        code, body = session.get(urls[0])
        assert expect is None or expect in body, f"{urls[0]}: {expect!r} not on the page"
        times = []
        for i in range(requests):
            started = time.perf_counter()
            code, _ = session.get(urls[i % len(urls)])
            times.append((time.perf_counter() - started) * 1000)
            assert code == 200, (urls[i % len(urls)], code)
        out[name] = summary(times, 50, 95)
        print(f"    {name:34} p50 {out[name]['p50_ms']:8.1f}  p95 {out[name]['p95_ms']:8.1f} ms", flush=True)
    return out


def measure_job_logs(ledger: Ledger, jobs: int, runs: int) -> dict[str, Any]:
    root = pipeline_roots(jobs, 1)[0]
    day_ago = datetime.fromtimestamp(time.time() - 86400, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    queries = {
        "one job (--job-id)": ["--job-id", job_id(root)],
        "filtered (--plugin --status failed)": ["--plugin", "plugin-07", "--status", "failed"],
        "unfiltered (newest 50)": [],
        # The spec's own examples (000 §"job logs"): a day's window, by plugin.
        "last 24 h (--from --plugin)": ["--from", day_ago, "--plugin", "plugin-07"],
    }
    out: dict[str, Any] = {}
    for name, args in queries.items():
        argv = [DUCTILE, "job", "logs", *args, "--json", "--config-dir", str(ledger.config.path)]
        times = []
        for _ in range(runs + 1):
            started = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True, env=ledger.env(), cwd=REPO, timeout=600)
            times.append((time.perf_counter() - started) * 1000)
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert json.loads(proc.stdout)["logs"], f"{name}: nothing found"
        out[name] = summary(times[1:], 50, 95)  # the first warms the page cache and the bytecode
        print(f"    job logs {name:34} p50 {out[name]['p50_ms']:8.1f}  p95 {out[name]['p95_ms']:8.1f} ms", flush=True)
    return out


PRUNE_SCRIPT = """
import json, sys, time
from gateway.bootstrap import prepare_process
prepare_process(sys.argv[1])
import django
django.setup()
from gateway.operations.housekeeping import prune
started = time.perf_counter()
deleted = prune(job_queue_retention=float(sys.argv[2]), job_log_retention=float(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - started, "deleted": deleted}))
"""


def measure_prune(ledger: Ledger, fraction: float) -> dict[str, Any]:
    """The housekeeping prune over the oldest `fraction` of the span, with enqueues meanwhile."""
    # Jobs were created evenly over DAYS days ending at the seed; the seed's end is about now.
    newest = ledger.query("SELECT MAX(created_at) FROM job_queue WHERE status = 'succeeded'")[0][0]
    retention = time.time() - ledger.epoch(newest) + DAYS * 86400 * (1 - fraction)
    expired = ledger.query(
        "SELECT COUNT(*) FROM job_queue WHERE completed_at IS NOT NULL AND completed_at < %s",
        [_cutoff_value(ledger, time.time() - retention)],
    )[0][0]
    before = trickle(ledger.port, 100, 0.05)
    before_waits = start_latencies(ledger, before["ids"])
    stop = threading.Event()
    during: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: during.update(trickle(ledger.port, None, 0.05, stop)))
    thread.start()
    try:
        proc = subprocess.run(
            [PYTHON, "-c", PRUNE_SCRIPT, str(ledger.config.path), str(retention)],
            capture_output=True,
            text=True,
            env=ledger.env(),
            cwd=REPO,
            timeout=6 * 3600,
        )
    finally:
        stop.set()
        thread.join()
    if proc.returncode != 0:
        raise RuntimeError(f"prune failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    during_waits = start_latencies(ledger, during["ids"])
    return {
        "expired_jobs": expired,
        "seconds": round(result["seconds"], 1),
        "deleted": result["deleted"],
        "before": {
            "enqueue_to_start": summary(before_waits, 50, 99),
            "post_round_trip": summary(before["trips"], 50, 99),
        },
        "during": {
            "enqueue_to_start": summary(during_waits, 50, 99),
            "post_round_trip": summary(during["trips"], 50, 99),
        },
    }


def _cutoff_value(ledger: Ledger, epoch: float) -> Any:
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment if ledger.backend == "postgres" else moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def run_ledger(ledger: Ledger, jobs: int, args: argparse.Namespace, reuse: bool) -> dict[str, Any]:
    label = f"{ledger.backend} {jobs:,} jobs"
    print(f"== {label}", flush=True)
    if reuse and ledger.exists():
        seeded: dict[str, Any] = {"reused": True}
        ledger.manage("migrate", "--noinput")
    else:
        seeded = ledger.create(jobs)
        print(f"  seeded in {seeded['seconds']} s", flush=True)
    ledger.manage("admin", "create-user", "ada", "--role", "auditor", "--password-stdin", stdin=PASSWORD) if not (
        ledger.query("SELECT 1 FROM auth_user WHERE username = 'ada'")
    ) else None
    out: dict[str, Any] = {"jobs": jobs, "seed": seeded, "size_mib": round(ledger.size_bytes() / 2**20)}
    out["speed_before"] = speed_probe(2)
    phases = set(args.phases.split(","))
    with system_start(ledger):
        post_job(ledger.port, "probe")  # the API's workers and the daemon warm
        if "latency" in phases:
            out["enqueue_to_start"] = measure_latency(ledger, args.latency_jobs)
            print(f"  enqueue -> start: {out['enqueue_to_start']}", flush=True)
        if "console" in phases:
            out["console"] = measure_console(ledger, jobs, args.requests)
        if "logs" in phases:
            out["job_logs"] = measure_job_logs(ledger, jobs, args.cli_runs)
        if "prune" in phases:
            out["prune"] = measure_prune(ledger, args.prune_fraction)
            print(f"  prune: {out['prune']}", flush=True)
    out["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000_000, help="the big ledger")
    parser.add_argument("--fresh-jobs", type=int, default=10_000, help="the fresh ledger beside it")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--postgres", metavar="ADMIN_URL", help="a server to make the PostgreSQL ledgers on")
    parser.add_argument("--base", default="/work/bench-10m", help="where the ledgers (SQLite files, configs) go")
    parser.add_argument("--keep", action="store_true", help="keep the big ledgers (and reuse them with --reuse)")
    parser.add_argument("--reuse", action="store_true", help="use the big ledger a --keep run left")
    parser.add_argument("--skip-fresh", action="store_true")
    parser.add_argument(
        "--phases", default="latency,console,logs,prune", help="which to measure (the prune, which deletes, last)"
    )
    parser.add_argument(
        "--prune-fraction", type=float, default=0.1, help="the oldest part of the span the prune deletes (0.1)"
    )
    parser.add_argument("--seed-only", action="store_true", help="make the big ledger, keep it, measure nothing")
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--requests", type=int, default=30, help="timed requests per console page")
    parser.add_argument("--cli-runs", type=int, default=10, help="timed runs of each `job logs`")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    for name in ("DATABASE_URL", "DUCTILE_DB_PATH", "DUCTILE_CONFIG_DIR", "DJANGO_SETTINGS_MODULE"):
        os.environ.pop(name, None)
    base = Path(args.base)
    base.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"benchmark": "ledger_scale", "machine": machine(), "commit": _commit()}
    for backend in args.backends.split(","):
        if args.seed_only:
            ledger = Ledger(base / f"{backend}-big-{args.jobs}", backend, args.postgres)
            results[backend] = ledger.create(args.jobs) | {"size_mib": round(ledger.size_bytes() / 2**20)}
            continue
        sizes = ([("fresh", args.fresh_jobs)] if not args.skip_fresh else []) + [("big", args.jobs)]
        for kind, jobs in sizes:
            ledger = Ledger(base / f"{backend}-{kind}-{jobs}", backend, args.postgres)
            keep = kind == "big" and args.keep
            try:
                results[f"{backend} {kind}"] = run_ledger(ledger, jobs, args, reuse=kind == "big" and args.reuse)
            finally:
                if not keep:
                    ledger.drop()
            if args.out:  # what is done so far, should a later ledger fail
                Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    emit(results, args.out)


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    return proc.stdout.strip() + ("-dirty" if dirty else "")


if __name__ == "__main__":
    main()
