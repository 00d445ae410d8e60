"""A newcomer's first commands: the state directory made on first use with private modes, no stray
database for a config that does not load, `--version`, console accounts, no system-check noise."""

from __future__ import annotations

import re
import stat
import subprocess
import urllib.request

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.urls import reverse

from gateway.version import gateway_version
from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.live_api import TOKEN, live_api
from tests.support.processes import cli_env, ductile, ductile_json, start_workers, stop_gracefully
from tests.support.waiting import wait_for


@pytest.fixture
def cfg(tmp_path) -> ConfigDir:
    config = ConfigDir(tmp_path / "config")
    config.write()
    return config


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_migrate_creates_the_state_directory_and_a_private_database(cfg):
    state = cfg.db_path.parent
    assert not state.exists()
    proc = ductile(cfg, "migrate", "--noinput")
    assert proc.returncode == 0, proc.stderr
    assert mode(state) == 0o700
    assert mode(cfg.db_path) == 0o600


def test_the_write_ahead_log_files_are_private_too(cfg):
    workers = start_workers(cfg)
    try:
        wal, shm = (cfg.db_path.with_name(cfg.db_path.name + suffix) for suffix in ("-wal", "-shm"))
        wait_for(lambda: wal.exists() and shm.exists(), timeout=60, what="the daemon to open the database")
        assert (mode(wal), mode(shm)) == (0o600, 0o600)
    finally:
        stop_gracefully(workers)


def test_a_state_path_that_cannot_be_created_is_named_in_the_error(cfg, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cfg.extra["state"] = {"path": str(blocker / "state" / "ductile.db")}
    cfg.write()
    for args in (["migrate", "--noinput"], ["job", "logs"]):
        proc = ductile(cfg, *args)
        assert proc.returncode == 1, proc.stderr
        assert f"cannot create the SQLite database {blocker}/state/ductile.db" in proc.stderr
        assert "Traceback" not in proc.stderr
    code, body = ductile_json(cfg, "job", "logs")
    assert code == 1 and "Not a directory" in body["error"]


def test_a_config_that_does_not_load_opens_no_database(cfg):
    (cfg.path / "config.yaml").write_text("service: [\n")
    for args in (["migrate", "--noinput"], ["job", "logs"], ["system", "status"]):
        proc = ductile(cfg, *args)
        assert proc.returncode == 78, (args, proc.stderr)
        assert "config.yaml" in proc.stderr and "Traceback" not in proc.stderr
    # Neither a database beside the config nor the one the config names was created.
    assert not list(cfg.path.rglob("*.db")) and not cfg.db_path.exists()


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_version_is_ours_not_djangos(cfg, argv):
    proc = subprocess.run(
        [str(REPO / ".venv/bin/ductile"), *argv], capture_output=True, text=True, env=cli_env(cfg), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"ductile {gateway_version()} (protocol 2")


def test_no_system_check_warnings(cfg):
    check = ductile(cfg, "check")
    assert check.returncode == 0 and "no issues" in check.stdout, check.stdout + check.stderr
    for args in (["migrate", "--noinput"], ["plugin", "list"]):
        proc = ductile(cfg, *args)
        assert "WARNINGS" not in proc.stderr and "W004" not in proc.stderr, proc.stderr


def create_user(cfg, *args: str, password: str | None = "correct horse battery"):
    return ductile(cfg, "admin", "create-user", *args, input=None if password is None else password + "\n")


def test_create_user_makes_a_staff_account_with_one_role(cfg):
    made = create_user(cfg, "alice", "--role", "auditor", "--password-stdin", "--json")
    assert made.returncode == 0, made.stderr
    again = create_user(cfg, "alice", "--role", "operator", "--password-stdin")
    assert again.returncode == 1 and "already exists" in again.stderr
    updated = create_user(cfg, "alice", "--role", "operator", "--password-stdin", "--update")
    assert updated.returncode == 0 and "updated alice (operator)" in updated.stdout
    weak = create_user(cfg, "bob", "--role", "auditor", "--password-stdin", password="12345")
    assert weak.returncode == 1 and "password refused" in weak.stderr and "too short" in weak.stderr
    no_tty = create_user(cfg, "carol", "--role", "auditor", password=None)
    assert no_tty.returncode == 2 and "--password-stdin" in no_tty.stderr
    unknown = create_user(cfg, "dave", "--role", "root", "--password-stdin")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["auditor", "operator"])
def test_an_account_logs_in_to_the_styled_console_and_can_view_the_jobs(client, role):
    from gateway.operations.accounts import save_account

    save_account("pat", role, "correct horse battery")
    user = User.objects.get(username="pat")
    assert user.is_staff and not user.is_superuser
    assert [g.name for g in user.groups.all()] == [role]
    login = client.get(reverse("admin:login"))
    assert b"ductile admin create-user" in login.content
    assert b"/static/ductile/console" in login.content  # hashed once collected
    assert client.login(request=HttpRequest(), username="pat", password="correct horse battery")
    index = client.get(reverse("admin:index"))
    assert index.status_code == 200 and b"Ductile" in index.content
    assert client.get(reverse("admin:ledger_job_changelist")).status_code == 200
    assert client.get(reverse("admin:auth_user_changelist")).status_code == 403


def test_a_gateway_started_without_set_up_collects_its_static_files_and_serves_styled_pages(cfg, tmp_path, monkeypatch):
    """Installed or checked out without scripts/_env.sh, nothing is collected: every console page
    was a 500 (with nothing in the log). The gateway's start collects them now, as set-up does."""
    static_root = tmp_path / "static-root"
    monkeypatch.setenv("DUCTILE_STATIC_ROOT", str(static_root))
    with live_api(cfg, [{"name": "admin", "token": TOKEN, "scopes": ["*"]}]) as live:
        base = f"http://127.0.0.1:{live.port}"
        with urllib.request.urlopen(f"{base}/admin/login/", timeout=30) as page:
            assert page.status == 200
            login = page.read()
        assert b'id="id_username"' in login
        css = re.search(rb'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', login)
        assert css, login[:2000]
        with urllib.request.urlopen(base + css[1].decode(), timeout=30) as served:
            assert served.status == 200 and b"body" in served.read()
    assert (static_root / "staticfiles.json").is_file()
