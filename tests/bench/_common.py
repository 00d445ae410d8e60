"""Shared helpers for the on-demand benchmarks in tests/bench/ (not a pytest module).

Each benchmark builds a throw-away config directory (its own plugin root, its own SQLite file),
runs the real `manage.py runworkers` as a subprocess, and cleans everything up afterwards.
Nothing here touches the network: SQLite files, pipes and UNIX datagram sockets only.
"""

from __future__ import annotations

import compileall
import contextlib
import datetime as dt
import functools
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
PYTHON = sys.executable

# The minimal POSIX-sh plugin of benchmark 1: reads its request, answers ok.
LOAD_AT_START = os.getloadavg()[0]

NOP_SCRIPT = '#!/bin/sh\ncat >/dev/null; printf \'{"status":"ok","result":"x"}\'\n'


def manifest(name: str, entrypoint: str = "run.sh", commands: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "manifest_spec": "ductile.plugin",
        "manifest_version": 1,
        "name": name,
        "version": "1.0.0",
        "protocol": 2,
        "entrypoint": entrypoint,
        "commands": commands or [{"name": "poll", "type": "read"}],
    }


def write_plugin(root: Path, name: str, script: str, commands: list[dict[str, Any]] | None = None) -> Path:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.yaml").write_text(yaml.safe_dump(manifest(name, commands=commands), sort_keys=False))
    entry = directory / "run.sh"
    entry.write_text(script)
    entry.chmod(0o755)
    return entry


class BenchConfig:
    """A config directory with one plugin root and one SQLite ledger, under a temp dir.
    `commands`: the plugins' manifest commands (default: `poll`, read); `extra`: more top-level
    config keys (e.g. `pipelines`)."""

    def __init__(
        self,
        base: Path,
        plugins: dict[str, str],
        *,
        max_workers: int = 2,
        parallelism: int = 2,
        commands: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
    ):
        self.base = base
        self.path = base / "config"
        self.path.mkdir(parents=True)
        self.plugin_root = base / "plugins"
        self.entrypoints = {
            name: write_plugin(self.plugin_root, name, script, commands) for name, script in plugins.items()
        }
        doc = {
            "service": {"max_workers": max_workers, "lease_ttl": "60s"},
            "plugin_roots": [str(self.plugin_root)],
            "state": {"path": str(self.db_path)},
            "plugins": {
                name: {"config": {}, "parallelism": parallelism, "retry": {"max_attempts": 1}} for name in plugins
            },
            "routes": [],
            **(extra or {}),
        }
        (self.path / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

        # TMPDIR of every gateway process of this config, so the per-database wake-up socket
        # directory the daemon creates under it goes away with the rest of `base`.
        self.tmp = base / "tmp"
        self.tmp.mkdir()

    @property
    def db_path(self) -> Path:
        return self.base / "state" / "ductile.db"

    def env(self) -> dict[str, str]:
        # XDG_CACHE_HOME: the memo of documents that passed their schema (gateway.config.validity)
        # is this config's, as a deployment's is its own; the first process on it fills it.
        return clean_env(TMPDIR=str(self.tmp), XDG_CACHE_HOME=str(self.base / "cache"))


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"ductile-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@functools.cache
def compiled_bytecode() -> None:
    """The gateway's modules compiled to bytecode before any process is timed. Why: a shell or CI
    image with PYTHONDONTWRITEBYTECODE never caches a module edited since its .pyc was written,
    and every process compiles it again at its start (~25 ms of a worker's at 16 stale modules,
    the run at 9f9a56c), where a deployed gateway starts from cached bytecode."""
    for package in ("gateway", "ledger", "pipelines", "ductile_site"):
        compileall.compile_dir(REPO / package, quiet=1)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for gateway subprocesses: no inherited database or config location."""
    compiled_bytecode()
    drop = (
        "DATABASE_URL",
        "DUCTILE_DB_PATH",
        "DUCTILE_CONFIG_DIR",
        "DUCTILE_TEST_SQLITE_PATH",
        "DJANGO_SETTINGS_MODULE",
    )
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(BENCH)])
    env.update(extra)
    return env


def helper(config: BenchConfig, *args: str, timeout: float = 300, stdin: str | None = None) -> Any:
    """Run tests/bench/_ledger_helper.py (Django set up on the config's database); its last stdout line is JSON."""
    proc = subprocess.run(
        [PYTHON, str(BENCH / "_ledger_helper.py"), str(config.path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=config.env(),
        cwd=REPO,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"helper {args} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (utime and stime, fields 14 and 15 of proc_pid_stat(5))."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """`cpu_seconds` of a process and its children (gunicorn's master and its workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0.0
    for member in (pid, *map(int, children)):
        with contextlib.suppress(OSError):  # a child that has just exited
            total += cpu_seconds(member)
    return total


def start_workers(
    config: BenchConfig, log_path: Path, *args: str, prefix: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """`manage.py runworkers` as a subprocess; its JSON log lines go to a file (a pipe nobody reads would block)."""
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process by stop_process
    proc = subprocess.Popen(
        [*(prefix or [PYTHON]), str(REPO / "manage.py"), "runworkers", "--config-dir", str(config.path), *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=config.env(),
        cwd=REPO,
        start_new_session=True,
    )
    proc._bench_log = log  # type: ignore[attr-defined]
    return proc


def stop_process(proc: subprocess.Popen[Any], timeout: float = 20) -> int:
    """SIGTERM (the daemon drains), then SIGKILL of the process group if it does not exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = getattr(proc, "_bench_log", None)
    if log is not None:
        log.close()
    return proc.returncode


def wait_until(predicate: Any, timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def sqlite_query(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """A short read-only look at a ledger (WAL: never blocks the daemon's writer)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def parse_ts(text: str) -> float:
    """A Django DateTimeField value as stored by SQLite (UTC, naive text) -> epoch seconds."""
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation): p99 of 200 samples is the 198th smallest."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * pct // 100))  # ceil
    return ordered[int(rank) - 1]


# The probe's loop: ~7.6 ms of pure Python at best on the AMD EPYC VM of docs/performance.md.
PROBE_LOOP = 300_000


def speed_probe(seconds: float) -> dict[str, float]:
    """How fast this machine runs Python now: a fixed loop, timed again and again for `seconds`.
    Why: on a shared VM the speed moves by tens of percent within minutes (another tenant on the
    same physical cores), and the load average, which counts this machine's tasks only, does not
    show it. `loop_ms_min` is the machine at its best in the window, `loop_ms_median` as it was
    most of the time; compare them across runs, not with other machines."""
    times: list[float] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until or not times:
        started = time.perf_counter()
        total = 0
        for i in range(PROBE_LOOP):
            total += i
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"loop_ms_min": round(times[0], 1), "loop_ms_median": round(times[len(times) // 2], 1)}


def machine() -> dict[str, Any]:
    cpu_model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    sqlite_version = sqlite3.sqlite_version
    return {
        "cpu_model": cpu_model,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite_version,
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ"),
        # Other work on the machine skews every number here; the 1-minute load when this script
        # started says how busy it was before the benchmark added its own load.
        "loadavg_1m_at_start": round(LOAD_AT_START, 2),
    }


def emit(result: dict[str, Any], out: str | None) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
