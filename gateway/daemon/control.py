"""Reaching the running gateway from another process. `system reload` and `POST /system/reload`
signal the `system start` supervisor found through its PID file (spec 000 §11.3: "Send SIGHUP to
the running process (found via PID file)"); it passes the signal to every process it runs. The CLI
calls that go over HTTP address the runtime that gateway serves (`served_runtime`)."""

from __future__ import annotations

import os
import pickle
import signal
from pathlib import Path

from gateway.config.errors import ConfigError
from gateway.config.model import GatewayConfig
from gateway.runtime import SNAPSHOT_FILE, Runtime, read_snapshot
from ledger.models.workers import pid_alive

# Here, not with the supervisor that writes it: `system status` reads it on every call, and the
# supervisor's module loads the daemons it runs.
PID_FILE = "ductile.pid"


def pid_file_for(config: GatewayConfig) -> Path:
    """Where `system start` records its PID: next to the state database, as the original does."""
    return config.state_path.parent / PID_FILE


def running_pid(pid_file: Path) -> int | None:
    """The PID a live gateway recorded in `pid_file`; None when there is no file or its process is
    gone (a stale file). ValueError when the file holds no PID."""
    try:
        text = pid_file.read_text().strip()
    except FileNotFoundError:
        return None
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"{pid_file} holds no PID ({text[:40]!r})")
    pid = int(text)
    return pid if pid_alive(pid) else None


def snapshot_file_for(config: GatewayConfig) -> Path:
    """The runtime snapshot `system start`'s children run on: beside the PID lock."""
    return config.state_path.parent / SNAPSHOT_FILE


class NotRunning(Exception):
    """No live `system start` supervisor for this config, with why."""


def gateway_pid(config: GatewayConfig) -> int:
    pid_file = pid_file_for(config)
    try:
        pid = running_pid(pid_file)
    except ValueError as exc:
        raise NotRunning(str(exc)) from exc
    if pid is None:
        raise NotRunning(
            f"no running gateway: {pid_file} is missing or names a process that is gone "
            "(`ductile system start` writes it)"
        )
    return pid


def reload_gateway(config: GatewayConfig) -> int:
    """SIGHUP the supervisor: every process reloads, each keeping its config if the new one is
    invalid. Returns the supervisor's PID."""
    pid = gateway_pid(config)
    os.kill(pid, signal.SIGHUP)
    return pid


def served_runtime(runtime: Runtime) -> Runtime:
    """The runtime the gateway running on `runtime`'s state directory serves (the snapshot its
    processes run on), else `runtime` itself. What a CLI call to the gateway's API must address:
    the config files read in another shell can resolve to another listen address or token (a
    variable set only in the gateway's shell, as `DUCTILE_DEMO_LISTEN=127.0.0.1:9000 ./scripts/demo`
    does over the demo's .env). A snapshot this user does not own is not read (unpickling runs
    code; the state directory belongs to the gateway's user), nor one that cannot be (another
    version's): the config read here answers then."""
    try:
        if running_pid(pid_file_for(runtime.config)) is None:
            return runtime
        snapshot = snapshot_file_for(runtime.config)
        if snapshot.stat().st_uid != os.geteuid():
            return runtime
        return read_snapshot(snapshot)
    except (OSError, ValueError, ConfigError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return runtime
