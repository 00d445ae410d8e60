"""Test helpers: config directories, CLI subprocesses and waiting on the ledger."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import ssl

    from gateway.runtime import RuntimeHolder
    from ledger.models import Job, JobLog

REPO = Path(__file__).resolve().parents[2]
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


def wait_for(
    predicate: Any,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
    explain: Callable[[], str] | None = None,
) -> Any:
    """`predicate()`'s first truthy value; on timeout an AssertionError naming `what`, with the end
    of what `explain()` returns then (a process's output so far), so the failure can be read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    message = f"timed out after {timeout}s waiting for {what}"
    raise AssertionError(f"{message}; meanwhile:\n{explain()[-4000:]}" if explain else message)


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


def run_until_idle(holder: RuntimeHolder, *, limit: int = 50, plugins: Collection[str] | None = None) -> int:
    """Run every job that is runnable now, and every job those runs enqueue (routed children,
    pipeline hops, `if:` switches), until none is due; the number of jobs run.

    The loop is the worker daemon's own (`runworkers --once`): WorkerDaemon's worker thread claims
    with the daemon's caps (every plugin at its cap plus `core.switch`) and runs each job through
    dispatch's Executor. Only the thread is driven, not `WorkerDaemon.run()`: registering a worker
    row, recovering lost jobs and scheduling `init` jobs are the daemon's start-up duties, tested
    with a real `runworkers` process (tests/processes/test_daemon.py), and would add rows a test of
    something else does not expect. A job whose retry is due later is left queued, as a worker
    would leave it.
    """
    from django.utils import timezone

    from gateway.execution.workers import WorkerDaemon
    from ledger.models import Job

    daemon = WorkerDaemon(holder, threads=1, plugins=plugins, once=True, max_jobs=limit, install_signals=False)
    # Its own thread, as in the daemon: the worker loop closes its database connections when it
    # ends, which must not be the test's own.
    worker = threading.Thread(target=daemon.work, name="ductile-test-worker")
    worker.start()
    worker.join()
    if daemon.claimed >= limit:
        caps = holder.get().claim_caps()
        if Job.objects.look(list(plugins or caps), timezone.now()).due:
            raise AssertionError(f"the queue was not idle after {limit} jobs")
    return daemon.claimed


def jobs_by_step(pipeline: str, exclude: Collection[str] = ()) -> dict[str | None, Job]:
    """The jobs of a pipeline's runs by step id (one run's, when the jobs of earlier runs are
    `exclude`d)."""
    from ledger.models import EventContext, Job

    # Keyed as Job.event_context_id is typed (nullable); every job picked here has a context.
    contexts: dict[str | None, str | None] = dict(
        EventContext.objects.filter(pipeline_name=pipeline).values_list("id", "step_id")
    )
    jobs = Job.objects.filter(event_context_id__in=list(contexts)).exclude(pk__in=list(exclude))
    return {contexts[job.event_context_id]: job for job in jobs}


def run_job(holder: RuntimeHolder, plugin: str, command: str = "poll", payload: Any = None, **spec: Any) -> Job:
    """Enqueue one job (the plugin's retry budget unless `max_attempts` is given) and run it, and
    whatever it enqueues, until the queue is idle; the job as it stands afterwards."""
    [job] = run_jobs(holder, [(plugin, command, payload)], **spec)
    return job


def run_jobs(holder: RuntimeHolder, jobs: list[tuple[str, str, Any]], **spec: Any) -> list[Job]:
    """`run_job` for a table of (plugin, command, payload): all enqueued, then run in one pass of
    the worker loop (a table of cases costs one worker start, not one each); the jobs in order."""
    from ledger.models import Job, JobSpec
    from ledger.submitters import Submitter

    ids = []
    for plugin, command, payload in jobs:
        attempts = spec.get("max_attempts", holder.get().registry.instances[plugin].config.retry.max_attempts)
        job_spec = JobSpec(
            plugin=plugin,
            command=command,
            submitter=Submitter.CLI,
            payload=payload,
            **{**spec, "max_attempts": attempts},
        )
        ids.append(Job.objects.enqueue(job_spec, default_dedupe_ttl=86400).job_id)
    run_until_idle(holder, limit=max(50, 4 * len(jobs)))
    found = Job.objects.in_bulk(ids)
    return [found[job_id] for job_id in ids]


def last_log(job: Job) -> JobLog:
    """The job's latest attempt as the ledger recorded it."""
    from ledger.models import JobLog

    return JobLog.objects.filter(job_id=job.id).latest("completed_at")


def last_result(job: Job) -> str:
    """What the job's latest attempt wrote (its response, or what was kept of it)."""
    result = last_log(job).result
    assert result is not None, f"job {job.id}'s last attempt kept no output"
    return result


def last_response(job: Job) -> Any:
    """The JSON response of the job's latest attempt."""
    return json.loads(last_result(job))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server a test starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(
    handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
) -> Iterator[int]:
    """`handler` served on a loopback address (a port of its own unless `port` is given; over TLS
    with a `tls` server context), on a thread, for the test's duration: its port."""
    server = ThreadingHTTPServer((host, port), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
