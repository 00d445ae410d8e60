"""`system start` serving the API (by default alone: no workers, no scheduler), for tests that
drive a real gunicorn over HTTP from a real client."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.support import REPO, ConfigDir, cli_env, stop_gracefully, wait_for
from tests.test_system_start import Api, free_port


@dataclass
class LiveApi:
    api: Api
    proc: subprocess.Popen[str]
    port: int


@contextmanager
def live_api(cfg: ConfigDir, tokens: list[dict[str, Any]], *, workers: bool = False) -> Iterator[LiveApi]:
    """`workers`: also run the workers and the scheduler (not the housekeeping cluster)."""
    port = free_port()
    cfg.extra["api"] = {"listen": f"127.0.0.1:{port}", "auth": {"tokens": tokens}}
    cfg.write()
    only = ["--no-housekeeping"] if workers else ["--no-workers", "--no-scheduler"]
    argv = [sys.executable, str(REPO / "manage.py"), "system", "start", *only]
    proc = subprocess.Popen(
        [*argv, "--config-dir", str(cfg.path)],
        env=cli_env(cfg),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    api = Api(port)
    try:
        wait_for(api.up, timeout=60, what="the API to answer /healthz")
        yield LiveApi(api, proc, port)
    finally:
        stop_gracefully(proc)
