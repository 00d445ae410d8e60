"""The units' `ProtectSystem=strict` with `ReadWritePaths=/var/lib/ductile /tmp /var/tmp`, and
their NoNewPrivileges, as the gateway meets them: `system start` (API, workers, scheduler,
housekeeping) and the CLI beside it under `setpriv --no-new-privs`, in a mount namespace where
everything is read-only (the code, the config directory, /etc, /usr) but the temp directory, in
which the state directory lies here. systemd cannot start the units on this machine (it is not
PID 1); this is the part of their hardening that could stop the gateway or its plugins, so it is
tried for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.network import free_port
from tests.support.processes import cli_env

pytestmark = pytest.mark.process

_SCRIPT = """
set -u
mount --make-rprivate /
mount --bind "$TEMP_ROOT" "$TEMP_ROOT"
mount --bind "$CONFIG" "$CONFIG" && mount -o remount,bind,ro "$CONFIG"
mount --bind "$CODE" "$CODE" && mount -o remount,bind,ro "$CODE"
mount -o remount,bind,ro /
if touch "$CONFIG/.probe" /etc/.ductile-probe "$CODE/.probe" 2>/dev/null; then echo "NOT READ-ONLY"; exit 3; fi
setpriv --no-new-privs "$DUCTILE" system start > "$STATE/start.log" 2>&1 &
gateway=$!
up=no
for _ in $(seq 1 120); do
  if "$DUCTILE" api /healthz > "$STATE/healthz.json" 2>&1; then up=yes; break; fi
  sleep 0.5
done
echo "up=$up"
setpriv --no-new-privs "$DUCTILE" plugin run echo > "$STATE/run.log" 2>&1
echo "run=$?"
kill -TERM "$gateway"
wait "$gateway"
echo "stopped=$?"
"""


def test_the_gateway_and_its_plugins_run_with_all_but_the_state_and_temp_directories_read_only(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root with util-linux: the read-only run must not be skipped")
        pytest.skip("needs root, unshare(1) and setpriv(1) (util-linux) to make a mount namespace")
    temp_root = Path(tempfile.gettempdir()).resolve()
    state = tmp_path / "state"
    assert temp_root in state.resolve().parents, "the state directory must lie in the writable temp directory"
    cfg = ConfigDir(tmp_path / "etc")
    cfg.extra["state"] = {"path": str(state / "ductile.db")}
    cfg.extra["api"] = {"listen": f"127.0.0.1:{free_port()}"}
    cfg.write()
    env = cli_env(
        cfg,
        DUCTILE_CONFIG_DIR=str(cfg.path),
        HOME=str(state),
        TEMP_ROOT=str(temp_root),
        CONFIG=str(cfg.path),
        CODE=str(REPO),
        STATE=str(state),
        DUCTILE=str(Path(sys.executable).parent / "ductile"),
    )
    state.mkdir(mode=0o700)
    proc = subprocess.run(
        ["unshare", "--mount", "sh", "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=180
    )
    log = (state / "start.log").read_text() if (state / "start.log").exists() else ""
    assert "NOT READ-ONLY" not in proc.stdout, "the namespace did not make the code and config read-only"
    assert "up=yes" in proc.stdout, f"{proc.stdout}{proc.stderr}\n{log[-3000:]}"
    assert "run=0" in proc.stdout, (state / "run.log").read_text()[-2000:]
    assert "stopped=0" in proc.stdout, log[-3000:]
    assert '"workers": 1' in (state / "healthz.json").read_text()
    assert "Read-only file system" not in log
