"""`system start` serving the API (by default alone: no workers, no scheduler), for tests that
drive a real gunicorn over HTTP from a real client (`Api`)."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.support.config_dirs import ConfigDir
from tests.support.network import free_port
from tests.support.output import Output
from tests.support.processes import start_system, stop_gracefully
from tests.support.waiting import wait_for

TOKEN = "tok-admin"


class Api:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str, body: dict | None = None, token: str | None = TOKEN, timeout: float = 60):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def up(self) -> bool:
        try:
            return self.call("GET", "/healthz", token=None, timeout=2)[0] == 200
        except OSError:
            return False


def post_bytes(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    """POST `body` as is (a webhook delivery): the status and the JSON answer."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@dataclass
class LiveApi:
    api: Api
    proc: subprocess.Popen[str]
    port: int
    output: Output  # the tree's output (stderr merged), read as it comes


# Printed at teardown, so a failed test's report shows what the gateway said meanwhile.
OUTPUT_TAIL_LINES = 150


@contextmanager
def live_api(
    cfg: ConfigDir,
    tokens: list[dict[str, Any]],
    *,
    workers: bool = False,
    settings: dict[str, Any] | None = None,
    roles: list[str] | None = None,
) -> Iterator[LiveApi]:
    """`workers`: also run the workers and the scheduler (not the housekeeping cluster).
    `settings`: more keys of `api:` (its listen address and tokens are set here). `roles`:
    `system start`'s flags instead (`--role api,workers --group media`)."""
    port = free_port()
    cfg.extra["api"] = {**(settings or {}), "listen": f"127.0.0.1:{port}", "auth": {"tokens": tokens}}
    cfg.write()
    only = ["--no-housekeeping"] if workers else ["--no-workers", "--no-scheduler"]
    if roles is not None:
        only = roles
    proc = start_system(cfg, *only)
    # Read as it comes: a pipe nobody reads fills (64 KiB), and then every process of the tree
    # that logs blocks on its next line (a long traceback is enough).
    output = Output(proc)
    api = Api(port)
    try:
        wait_for(api.up, timeout=60, what="the API to answer /healthz", explain=lambda: output.text)
        yield LiveApi(api, proc, port, output)
    finally:
        stop_gracefully(proc)
        print("".join(output.finish().splitlines(keepends=True)[-OUTPUT_TAIL_LINES:]))
