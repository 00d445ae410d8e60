"""`config_snapshots` (spec 000 Database Reference, a fact table): the row `system start` and each
reload write for a config not seen before, redacted; read back with `config snapshots`, kept
by retention while it describes the config in force. (The supervisor writing them at start and
at SIGHUP: tests/processes/test_reload_snapshot.py.)"""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from gateway.daemon.config_snapshots import record_config
from gateway.operations.housekeeping import prune
from gateway.runtime import RUNTIME, build_runtime
from ledger.models import ConfigSnapshot
from tests.support.config_dirs import ConfigDir

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

SECRET = "sk-do-not-store-me"


def snapshots(config_dir: ConfigDir, *args: str) -> tuple[int, Any]:
    """`ductile config snapshots [args] --json` in this process."""
    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    RUNTIME.load(config_dir.path)
    out, code = io.StringIO(), 0
    try:
        call_command("config", "snapshots", *args, "--json", stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous
    return code, json.loads(out.getvalue())


def test_each_distinct_config_is_one_redacted_row(config_dir: ConfigDir) -> None:
    config_dir.plugins["echo"]["config"] = {"message": "hi", "api_key": SECRET}
    config_dir.write()
    record_config(build_runtime(config_dir.path), "start")
    record_config(build_runtime(config_dir.path), "reload")  # the same config: nothing new
    assert ConfigSnapshot.objects.count() == 1
    first = ConfigSnapshot.objects.get()
    assert first.reason == "start" and first.fingerprint.startswith("blake3:")
    assert first.loaded_by.startswith("system start (pid ") and first.config_dir == str(config_dir.path)
    assert {"path": str(config_dir.path / "config.yaml"), "tier": "operational"} == {
        k: v for k, v in first.files[0].items() if k != "blake3"
    }
    assert first.content["plugins"]["echo"]["config"] == {"message": "hi", "api_key": "[REDACTED]"}
    assert SECRET not in json.dumps(first.content) + json.dumps(first.files)

    config_dir.plugins["echo"]["config"]["message"] = "changed"
    config_dir.write()
    record_config(build_runtime(config_dir.path), "reload")
    assert ConfigSnapshot.objects.count() == 2

    code, listed = snapshots(config_dir)
    assert code == 0
    rows = listed["snapshots"]
    assert [r["reason"] for r in rows] == ["reload", "start"] and "content" not in rows[0]
    assert rows[1]["fingerprint"] == first.fingerprint and rows[0]["loaded_at"].endswith("Z")
    code, shown = snapshots(config_dir, first.fingerprint[:16])
    assert code == 0 and shown["content"]["plugins"]["echo"]["config"]["message"] == "hi"
    code, missing = snapshots(config_dir, "blake3:nothing")
    assert code == 1 and "no config snapshot with a fingerprint starting 'blake3:nothing'" in missing["error"]


def test_retention_prunes_old_configs_but_never_the_one_in_force(config_dir: ConfigDir) -> None:
    config_dir.write()
    record_config(build_runtime(config_dir.path), "start")
    config_dir.service["name"] = "renamed"
    config_dir.write()
    record_config(build_runtime(config_dir.path), "reload")
    long_ago = timezone.now() - timedelta(days=90)
    ConfigSnapshot.objects.update(loaded_at=long_ago)
    newest = ConfigSnapshot.objects.get(reason="reload")
    newest.loaded_at = long_ago + timedelta(seconds=1)
    newest.save()
    deleted = prune(job_queue_retention=86400, job_log_retention=30 * 86400)
    assert deleted["config_snapshots"] == 1
    assert list(ConfigSnapshot.objects.values_list("reason", flat=True)) == ["reload"]
