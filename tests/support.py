"""Test helpers: config directories, CLI subprocesses and waiting on the ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
PLUGIN_ROOTS = [str(REPO / "plugins"), str(REPO / "tests" / "plugins")]


class ConfigDir:
    """Builds a config directory: `config.yaml` plus any extra files, written on demand."""

    def __init__(self, path: Path):
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self.service: dict[str, Any] = {"max_workers": 2, "lease_ttl": "60s"}
        self.plugins: dict[str, Any] = {
            "echo": {"config": {"message": "hi"}},
            "stress": {"config": {}, "timeout": "20s", "retry": {"max_attempts": 1}},
            "probe": {"config": {}},
            "py-greet": {"config": {"name": "Test"}},
        }
        self.routes: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}
        # Set by the `process_db` fixture on the PostgreSQL run: subprocesses use this database.
        self.database_url: str | None = None
        # `write()` seals the directory (`.checksums`) the way `config lock` does; integrity tests
        # turn it off or tamper afterwards.
        self.sealed = True

    @property
    def db_path(self) -> Path:
        return self.path / "state" / "ductile.db"

    def write(self) -> Path:
        doc = {
            "service": self.service,
            "plugin_roots": PLUGIN_ROOTS,
            "state": {"path": str(self.db_path)},
            "plugins": self.plugins,
            "routes": self.routes,
            **self.extra,
        }
        (self.path / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        if self.sealed:
            self.lock()
        return self.path

    def lock(self) -> None:
        seal(self.path)

    def file(self, name: str, text: str) -> Path:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target


def seal(directory: Path) -> None:
    """`config lock`: seal every file the config reads and fingerprint every configured plugin, as
    an operator would after editing (tests about what a config says, not about the seal, start
    from a sealed directory). A config whose files cannot be read is left unsealed: loading it
    reports why."""
    from gateway.config.errors import ConfigError
    from gateway.plugins.seal import lock_config

    try:
        lock_config(directory)
    except ConfigError:
        pass


def load_runtime(config: ConfigDir, environ: Mapping[str, str] | None = None) -> Any:
    """Write the config and make it the process runtime (gateway.runtime.RUNTIME); a config
    error fails the test with its message."""
    from gateway.runtime import RUNTIME

    config.write()
    RUNTIME.load(config.path, os.environ if environ is None else environ)
    if RUNTIME.error:
        raise RUNTIME.error
    return RUNTIME


@contextmanager
def installed_runtime(config: ConfigDir, environ: Mapping[str, str] | None = None) -> Iterator[Any]:
    """`load_runtime` for the length of a block; the previous process runtime comes back after."""
    from gateway.runtime import RUNTIME

    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    try:
        yield load_runtime(config, environ)
    finally:
        RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous


def cli_env(config: ConfigDir, **extra: str) -> dict[str, str]:
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


def stop_gracefully(proc: subprocess.Popen[Any], timeout: float = 90) -> None:
    """SIGTERM (the gateway drains), then SIGKILL if it outlives `timeout`; nothing left running."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


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


def run_sql(config: ConfigDir, statement: str) -> None:
    """One SQL statement on the database a config's gateway processes use: how a test moves rows
    back in time (a job finished days ago, a schedule due now)."""
    ledger(config, "sql", statement)


def drain(holder: Any, limit: int = 50) -> None:
    """Run every runnable job in this process through the normal claim path and real plugin
    processes until the queue is empty."""
    from gateway.execution.dispatch import Executor
    from ledger.models import Job

    executor = Executor(holder, "w1")
    for _ in range(limit):
        job = Job.objects.claim_next(worker_id="w1", caps=holder.get().registry.claim_caps(), lease_ttl=60)
        if job is None:
            return
        executor.execute(job)
    raise AssertionError("queue did not drain")
