"""Gateway processes a test starts as a user would (the CLI, `runworkers`, `system start`, `python -c`
scripts), the processes under them, and the ledger they use, read or written from a subprocess."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir

# Whether the running test is marked `process` (set before each test by tests/conftest.py). A test
# that builds a gateway process's environment without the mark fails, so the in-process run
# (`-m "not process"`) starts no gateway process, and a new process test cannot miss the mark.
process_test_running = True


def _process_test() -> None:
    if not process_test_running:
        raise AssertionError("this test starts a gateway process: mark it `process` (pytest.mark.process)")


def cli_env(config: ConfigDir, **extra: str) -> dict[str, str]:
    """The environment of a gateway process a test starts on `config`."""
    _process_test()
    drop = ("DATABASE_URL", "DUCTILE_DB_PATH", "DUCTILE_CONFIG_DIR", "DUCTILE_TEST_SQLITE_PATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if config.database_url:
        env["DATABASE_URL"] = config.database_url
    env.update(extra)
    env["PYTHONPATH"] = str(REPO)
    return env


def ductile(
    config: ConfigDir,
    *args: str,
    timeout: float = 60,
    input: str | None = None,
    limits: Callable[[], None] | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run the `ductile` CLI in a subprocess, as a user would (`input` on its stdin; `limits` run
    in the child before it starts, e.g. resource limits)."""
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args, "--config-dir", str(config.path)],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(config, **env),
        cwd=REPO,
        preexec_fn=limits,
    )


def imported_modules(stderr: str) -> set[str]:
    """The modules a process run with PYTHONPROFILEIMPORTTIME=1 imported, from its stderr."""
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def ductile_json(config: ConfigDir, *args: str, **kw: Any) -> tuple[int, Any]:
    proc = ductile(config, *args, "--json", **kw)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stdout!r} {proc.stderr!r}") from exc


def start_workers(config: ConfigDir, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "runworkers", "--config-dir", str(config.path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(config, **env),
        cwd=REPO,
    )


def script_env(config: ConfigDir, database: Path) -> dict[str, str]:
    """The environment of a `python -c` script on `config` with its ledger in the SQLite file
    `database` (a file of the test's own, so a script can show what other processes see)."""
    _process_test()
    config.write()
    env = {k: v for k, v in os.environ.items() if k != "DUCTILE_DB_PATH"}
    env.update(PYTHONPATH=str(REPO), DUCTILE_CONFIG_DIR=str(config.path), DATABASE_URL=f"sqlite:///{database}")
    return env


def start_script(script: str, env: Mapping[str, str]) -> subprocess.Popen[str]:
    """A `python -c` script a test talks to over its stdin and stdout, line by line."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=dict(env),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_system(config: ConfigDir, *args: str) -> subprocess.Popen[str]:
    """`system start` on `config`, its output (stderr merged) on the returned process's stdout."""
    return subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "system", "start", *args, "--config-dir", str(config.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(config),
        cwd=REPO,
    )


def children(pid: int) -> list[int]:
    """`pid`'s child processes now (none once it has exited)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def descendants(root: int) -> dict[int, str]:
    """`root`'s descendant processes now, each with its command line."""
    found: dict[int, str] = {}
    pending = children(root)
    while pending:
        pid = pending.pop()
        pending += children(pid)
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            pass  # it exited meanwhile
    return found


def stop_gracefully(proc: subprocess.Popen[Any], timeout: float = 90) -> None:
    """SIGTERM (the gateway drains), then SIGKILL if it outlives `timeout`; nothing left running."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_SNIPPET = """
import json, sys
from gateway.bootstrap import prepare_process
prepare_process(sys.argv[1])
import django
django.setup()
from gateway.storage.database import ensure_schema
ensure_schema()
from ledger.models import Job, JobSpec, JobTransition
from ledger.submitters import Submitter
action = sys.argv[2]
if action == "enqueue":
    specs = json.loads(sys.stdin.read())
    for spec in specs:
        spec["submitter"] = Submitter(spec.pop("submitted_by", "cli"))
    ids = [Job.objects.enqueue(JobSpec(**spec), default_dedupe_ttl=86400).job_id for spec in specs]
    print(json.dumps(ids))
elif action == "sql":
    from django.db import connection
    with connection.cursor() as cursor:
        cursor.execute(json.loads(sys.stdin.read()))
    print("null")
else:
    rows = list(Job.objects.order_by("created_at").values("id", "plugin", "command", "status", "attempt",
                                                           "claimed_by", "last_error", "max_attempts"))
    for row in rows:
        row["transitions"] = list(JobTransition.objects.filter(job_id=row["id"]).order_by("id").values_list(
            "to_status", "reason"))
    print(json.dumps(rows))
"""


def ledger(config: ConfigDir, action: str = "jobs", specs: list[dict[str, Any]] | str | None = None) -> Any:
    """Enqueue into, or read, the database a config's gateway processes use (in a subprocess);
    action "sql" runs one statement (`specs`) there."""
    _process_test()
    if action == "jobs" and (jobs := _read_jobs(config)) is not None:
        return jobs
    # The database named directly, so this works even while the config itself is broken.
    database = config.database_url or f"sqlite:///{config.db_path}"
    proc = subprocess.run(
        [sys.executable, "-c", _SNIPPET, str(config.path), action],
        input=json.dumps(specs or []),
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(config, DATABASE_URL=database),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


_JOBS = (
    "SELECT id, plugin, command, status, attempt, claimed_by, last_error, max_attempts FROM job_queue "
    "ORDER BY created_at, id"
)
_TRANSITIONS = "SELECT job_id, to_status, reason FROM job_transitions ORDER BY id"
_JOB_FIELDS = ("id", "plugin", "command", "status", "attempt", "claimed_by", "last_error", "max_attempts")


def _read_jobs(config: ConfigDir) -> list[dict[str, Any]] | None:
    """`ledger(config)`'s rows read here, on a connection of the test's own: a process that sets up
    Django to read them cost about 0.7 s of CPU, at every turn of a test's polling loop. None when
    the database cannot be read so (not made yet, no ledger in it, broken): the subprocess, which
    makes the ledger on a new database, answers then, as it always did."""
    try:
        if config.database_url:
            import psycopg

            with psycopg.connect(config.database_url, autocommit=True) as pg:
                jobs, moves = pg.execute(_JOBS).fetchall(), pg.execute(_TRANSITIONS).fetchall()
        else:
            if not config.db_path.exists():
                return None
            with closing(sqlite3.connect(config.db_path, timeout=30)) as db:
                jobs, moves = db.execute(_JOBS).fetchall(), db.execute(_TRANSITIONS).fetchall()
    except Exception:
        return None
    transitions: dict[str, list[list[str]]] = {}
    for job_id, to_status, reason in moves:
        transitions.setdefault(job_id, []).append([to_status, reason])
    rows = [dict(zip(_JOB_FIELDS, job, strict=True)) for job in jobs]
    return [{**row, "transitions": transitions.get(row["id"], [])} for row in rows]


def run_sql(config: ConfigDir, statement: str) -> None:
    """One SQL statement on the database a config's gateway processes use: how a test moves rows
    back in time (a job finished days ago, a schedule due now)."""
    ledger(config, "sql", statement)
