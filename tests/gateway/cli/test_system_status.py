"""`system status` as the original answers it: its check list (config_discovery, config_load,
state_db, pid_lock) with the overall status, for a healthy gateway and for a broken config or
database too, and exit codes that say which (0, 78 for the config or schema, 1 otherwise)."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest
from django.core.management import call_command

from gateway.runtime import RUNTIME
from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile, ductile_json

CHECKS = ["config_discovery", "config_load", "state_db", "pid_lock"]


@pytest.mark.process
def test_a_healthy_instance_lists_every_check_ok(config_dir: ConfigDir) -> None:
    config_dir.write()
    code, body = ductile_json(config_dir, "system", "status")
    assert code == 0 and body["status"] == "ok" and body["healthy"] is True
    assert [(c["name"], c["status"]) for c in body["checks"]] == [(name, "ok") for name in CHECKS]
    lock = body["checks"][3]
    assert lock["path"] == str(config_dir.db_path.parent / "ductile.pid")
    assert lock["detail"] == "no gateway running (no live PID lock)"
    text = ductile(config_dir, "system", "status").stdout
    assert "  config_load: OK - configuration loaded" in text


def test_a_broken_config_still_answers_the_checks_with_exit_78(config_dir: ConfigDir) -> None:
    config_dir.service["max_workers"] = 0
    config_dir.write()
    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    RUNTIME._current = None  # a load that fails keeps what an earlier one loaded, as a reload does
    RUNTIME.load(config_dir.path)
    out = io.StringIO()
    try:
        call_command("system", "status", "--json", stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        code = exc.code
    finally:
        RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous
    body = json.loads(out.getvalue())
    assert code == 78 and body["exit_code"] == 78 and body["status"] == "fail" and body["healthy"] is False
    assert [(c["name"], c["status"]) for c in body["checks"]] == [
        ("config_discovery", "ok"),
        ("config_load", "fail"),
        ("state_db", "skipped"),
        ("pid_lock", "skipped"),
    ]
    assert "service.max_workers" in body["checks"][1]["detail"]
    assert [p["key"] for p in body["problems"]] == ["service.max_workers"]


@pytest.mark.process
def test_a_database_behind_the_code_fails_state_db_with_exit_78(config_dir: ConfigDir) -> None:
    config_dir.write()
    assert ductile(config_dir, "system", "status").returncode == 0
    with sqlite3.connect(config_dir.db_path) as db:
        db.execute(
            "DELETE FROM django_migrations WHERE id = (SELECT MAX(id) FROM django_migrations WHERE app = 'ledger')"
        )
    code, body = ductile_json(config_dir, "system", "status")
    assert code == 78 and body["status"] == "fail"
    assert [(c["name"], c["status"]) for c in body["checks"]] == [
        ("config_discovery", "ok"),
        ("config_load", "ok"),
        ("state_db", "fail"),
        ("pid_lock", "ok"),
    ]
    assert "behind this version" in body["checks"][2]["detail"] and "ductile migrate" in body["error"]
