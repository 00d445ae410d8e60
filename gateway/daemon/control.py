"""Reaching the running gateway from another process. `system reload` and `POST /system/reload`
signal the `system start` supervisor found through its PID file (spec 000 §11.3: "Send SIGHUP to
the running process (found via PID file)"); it passes the signal to every process it runs."""

from __future__ import annotations

import os
import signal

from gateway.config.model import GatewayConfig
from gateway.daemon.supervisor import pid_file_for, running_pid


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
