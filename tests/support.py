"""Test helpers: config directories, CLI subprocesses and waiting on the ledger."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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
        return self.path

    def file(self, name: str, text: str) -> Path:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target


def cli_env(config: ConfigDir, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DUCTILE_DB_PATH")}
    if os.environ.get("DUCTILE_PROCESS_DATABASE_URL"):
        env["DATABASE_URL"] = os.environ["DUCTILE_PROCESS_DATABASE_URL"]
    env.update(extra)
    env["PYTHONPATH"] = str(REPO)
    return env


def ductile(config: ConfigDir, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the `ductile` CLI in a subprocess, as a user would."""
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args, "--config-dir", str(config.path)],
        capture_output=True, text=True, timeout=timeout, env=cli_env(config, **env), cwd=REPO,
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
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(config, **env), cwd=REPO,
    )


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
