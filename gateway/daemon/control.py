"""Reaching the running gateway from another process. `system reload` and `POST /system/reload`
signal the `system start` supervisor found through its PID file (spec 000 §11.3: "Send SIGHUP to
the running process (found via PID file)"); it passes the signal to every process it runs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from gateway.config.model import GatewayConfig
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
