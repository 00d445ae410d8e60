"""`system backup` and `system restore` as an operator runs them: the scope ladder, the manifest,
refusing to overwrite, and a backup taken while the daemon runs jobs restored into a fresh
directory that starts and finds the same jobs, plugin facts and circuit breakers."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.processes import cli_env, ductile, ductile_json, ledger, start_workers
from tests.support.waiting import wait_for

SCOPES = ["db", "config", "plugins", "all"]
PAST = "2026-01-01T00:00:00Z"


@pytest.fixture
def rich(process_db):
    """A config directory with something for every rule: an include holding API settings, an env
    file, notes, VCS and build junk, and a plugin root of its own inside it."""
    cfg = process_db
    cfg.file(".env", "GREETING=hello\n")
    cfg.file("api.yaml", "api:\n  enabled: false\n")
    cfg.file("notes.txt", "the operator's notes\n")
    cfg.file("__pycache__/cached.pyc", "junk")
    cfg.file(".git/HEAD", "ref: refs/heads/main\n")
    cfg.file("myplugins/hello/run.sh", "#!/bin/sh\n")
    cfg.file("myplugins/hello/cached.pyc", "junk")
    cfg.file("myplugins/hello/node_modules/dep.js", "junk")
    cfg.file("myplugins/.git/config", "junk")
    cfg.extra["include"] = ["api.yaml"]
    cfg.extra["environment_vars"] = {"include": [".env"]}
    cfg.extra["plugin_roots"] = [str(REPO / "plugins"), str(REPO / "tests" / "plugins"), "myplugins"]
    cfg.write()
    ledger(cfg, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}])
    return cfg


def members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return set(tar.getnames())


def read_member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        handle = tar.extractfile(name)
        assert handle is not None
        return handle.read()


def manifest_of(archive: Path) -> dict:
    return yaml.safe_load(read_member(archive, "BACKUP_MANIFEST.txt"))


def backup(cfg: ConfigDir, target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return ductile(cfg, "system", "backup", "--to", str(target), *args)


def without_database(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "DATABASE_URL"}


def restore(
    archive: Path, target: Path, *args: str, database_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`system restore` run from no config at all, as on a fresh host."""
    env = without_database(os.environ.copy())
    env["PYTHONPATH"] = str(REPO)
    env.pop("DUCTILE_CONFIG_DIR", None)
    env.pop("DUCTILE_DB_PATH", None)
    if database_url:
        env["DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "system", "restore", str(archive), "--to", str(target), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


@pytest.mark.postgres
def test_the_scopes_are_a_nested_ladder_with_the_spec_exclusions(rich, tmp_path):
    for scope in SCOPES:
        done = backup(rich, tmp_path / f"{scope}.tar.gz", "--scope", scope)
        assert done.returncode == 0, done.stderr
    db, config, plugins, everything = (members(tmp_path / f"{scope}.tar.gz") for scope in SCOPES)
    snapshot = "db/ledger.jsonl" if rich.database_url else "db/ductile.sqlite"
    assert db == {"BACKUP_MANIFEST.txt", "uid.txt", snapshot}
    assert db < config < plugins < everything
    assert config - db == {
        "config/config.yaml",
        "config/api.yaml",
        "config/notes.txt",
        *(["config/.checksums"] if (rich.path / ".checksums").exists() else []),
    }
    added = plugins - config
    assert all(name.startswith("plugins/") for name in added)
    assert {
        "plugins/00-plugins/echo/manifest.yaml",
        "plugins/01-plugins/probe/run.sh",
        "plugins/02-myplugins/hello/run.sh",
    } <= added
    junk = ("/.git/", "node_modules", "__pycache__", ".pyc")
    assert not [name for name in everything if any(j in name for j in junk)]
    assert everything - plugins == {"config/.env"}
    assert not [name for name in everything if name.startswith("config/state/")]  # the live database files


@pytest.mark.postgres
def test_the_manifest_records_origin_contents_exclusions_and_boundary_warnings(rich, tmp_path):
    archive = tmp_path / "config.tar.gz"
    done = backup(rich, archive)
    assert done.returncode == 0, done.stderr
    # The INCLUDED/EXCLUDED list comes first, then the result.
    out = done.stdout
    # The scope says what it holds: `config` has the database too (issue 36: its name alone hid it).
    included = "INCLUDED (scope config: the database snapshot and the config directory):"
    assert out.index(included) < out.index("EXCLUDED:") < out.index("backup written:")
    assert f"  + config/api.yaml  <- {rich.path / 'api.yaml'}" in out
    manifest = manifest_of(archive)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert manifest["format"] == "ductile-backup/1" and manifest["scope"] == "config"
    assert manifest["ductile_version"] and manifest["ductile_commit"].removesuffix("-dirty") == commit.stdout.strip()
    assert manifest["hostname"] == socket.gethostname() and manifest["created_at"].endswith("Z")
    assert manifest["source"] == {
        "config_dir": str(rich.path),
        "state_path": str(rich.db_path),
        "plugin_roots": [str(REPO / "plugins"), str(REPO / "tests" / "plugins"), str(rich.path / "myplugins")],
        "env_files": [str(rich.path / ".env")],
    }
    database = manifest["database"]
    assert database["engine"] == ("postgresql" if rich.database_url else "sqlite")
    assert database["sha256"] == hashlib.sha256(read_member(archive, database["archive_path"])).hexdigest()
    assert {i["path"] for i in manifest["included"]} == members(archive) - {"BACKUP_MANIFEST.txt", "uid.txt"}
    reasons = {
        Path(e["source"]).relative_to(rich.path).as_posix(): e["reason"]
        for e in manifest["excluded"]
        if e["source"].startswith(str(rich.path))
    }
    assert reasons[".env"] == "environment file (secrets): archived at scope all"
    assert reasons["myplugins"] == "plugin root: archived at scope plugins and above"
    assert reasons[".git"].startswith("VCS or build artefacts") and reasons["__pycache__"].startswith("VCS")
    if not rich.database_url:
        assert reasons["state/ductile.db"].startswith("the live database")
    assert any(w.startswith("config/api.yaml holds API credentials") for w in manifest["warnings"])
    assert manifest["config_files"] == ["config.yaml", "api.yaml"]

    everything = manifest_of(_backup_ok(rich, tmp_path / "all.tar.gz", "--scope", "all"))
    assert any("environment files, secrets in plain text" in w for w in everything["warnings"])
    assert {m["archive_path"] for m in everything["plugin_roots"]} == {
        "plugins/00-plugins",
        "plugins/01-plugins",
        "plugins/02-myplugins",
    }
    assert everything["env_files"] == [{"archive_path": "config/.env", "source_path": str(rich.path / ".env")}]


def test_an_archive_names_itself_in_uid_txt_and_leaves_the_running_gateways_lock_files_out(rich, tmp_path):
    """Item 158, as the original: `uid.txt` and the manifest's `backup_uid` pair an archive with
    what is kept apart from it; the synchronous-trigger slots' lock files (and the other files a
    running gateway makes again at start) are not archived. new-10: their directory is 0700."""
    from gateway.http.api.syncgate import sync_slot

    state = rich.db_path.parent
    with sync_slot(state / "sync-slots", 1):  # as a synchronous pipeline trigger holds one
        pass
    assert (state / "sync-slots").stat().st_mode & 0o777 == 0o700
    for name in (
        "ductile.runtime",
        "ductile.streams",
        "api-auth-failures.json",
        "webhook-rejections.json",
        "ductile.children",
    ):
        (state / name).write_text("runtime")
    first = tmp_path / "one.tar.gz"
    written = backup(rich, first)
    assert written.returncode == 0, written.stderr
    uid = read_member(first, "uid.txt").decode().strip()
    assert re.fullmatch(r"[0-9a-hjkmnp-tv-z]{12}", uid) and manifest_of(first)["backup_uid"] == uid
    assert f"backup uid {uid};" in written.stdout.splitlines()[-1]
    second = _backup_ok(rich, tmp_path / "two.tar.gz")
    assert read_member(second, "uid.txt").decode().strip() != uid
    assert not [name for name in members(first) if "sync-slot" in name or name.startswith("config/state/")]
    reasons = {e["source"]: e["reason"] for e in manifest_of(first)["excluded"]}
    assert reasons[str(state / "sync-slots")].startswith("lock files of the API's synchronous-trigger slots")
    assert reasons[str(state / "ductile.runtime")].startswith("runtime state of a running gateway")

    restored = restore(first, tmp_path / "restored", "--json")
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["backup_uid"] == uid


def test_a_running_gateways_files_in_an_older_archive_are_not_restored(rich, tmp_path):
    """Before: an archive carried `state/ductile.children`, and the gateway restored from it beside
    the live one ended the live gateway's processes at its first start (issue 35 audit, N1)."""
    archive = _backup_ok(rich, tmp_path / "new.tar.gz")
    older = tmp_path / "older.tar.gz"
    record = b'{"written_in": "/elsewhere", "children": []}'
    with tarfile.open(archive, "r:gz") as source, tarfile.open(older, "w:gz") as out:
        for member in source.getmembers():
            out.addfile(member, source.extractfile(member) if member.isfile() else None)
        for name in ("config/state/ductile.children", "config/state/ductile.pid"):
            planted = tarfile.TarInfo(name)
            planted.size = len(record)
            out.addfile(planted, io.BytesIO(record))
    restored = restore(older, tmp_path / "restored")
    assert restored.returncode == 0, restored.stderr
    assert not list((tmp_path / "restored").rglob("ductile.children"))
    assert not list((tmp_path / "restored").rglob("ductile.pid"))


def test_the_runtime_file_names_a_backup_leaves_out_are_their_owners_names():
    from gateway.daemon.tree import CHILDREN_FILE
    from gateway.http import refusals, streamseats
    from gateway.operations.backups import scope
    from gateway.runtime import SNAPSHOT_FILE

    owned = {SNAPSHOT_FILE, streamseats.FILE_NAME, refusals.API_TALLY, refusals.WEBHOOK_TALLY, CHILDREN_FILE}
    assert set(scope.RUNTIME_FILES) == owned
    views = (REPO / "gateway" / "http" / "api" / "views.py").read_text()
    assert f'state_path.parent / "{scope.SYNC_SLOTS}"' in views


def _backup_ok(cfg: ConfigDir, target: Path, *args: str) -> Path:
    done = backup(cfg, target, *args)
    assert done.returncode == 0, done.stderr
    return target


def test_an_existing_destination_is_never_overwritten_and_a_dry_run_writes_nothing(rich, tmp_path):
    taken = tmp_path / "taken.tar.gz"
    taken.write_bytes(b"the operator's own file")
    refused = backup(rich, taken)
    assert refused.returncode == 1
    assert f"{taken} already exists: refusing to overwrite it" in refused.stderr
    assert taken.read_bytes() == b"the operator's own file"

    planned = tmp_path / "planned.tar.gz"
    code, preview = ductile_json(rich, "system", "backup", "--to", str(planned), "--dry-run")
    assert code == 0 and preview["dry_run"] is True and not planned.exists()
    assert {i["path"] for i in preview["included"]} >= {"config/config.yaml", "config/api.yaml"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config", "taken.tar.gz"]  # no work directory left


def test_restore_refuses_a_used_directory_and_anything_but_a_backup(rich, tmp_path):
    archive = _backup_ok(rich, tmp_path / "b.tar.gz")
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    refused = restore(archive, used)
    assert refused.returncode == 1 and f"{used} is not empty" in refused.stderr
    assert [p.name for p in used.iterdir()] == ["keep.txt"]

    bogus = tmp_path / "bogus.tar.gz"
    with tarfile.open(bogus, "w:gz") as tar:
        info = tarfile.TarInfo("hello.txt")
        tar.addfile(info, io.BytesIO(b""))
    refused = restore(bogus, tmp_path / "fresh")
    assert refused.returncode == 1 and "has no BACKUP_MANIFEST.txt: not a ductile backup" in refused.stderr
    assert restore(tmp_path / "missing.tar.gz", tmp_path / "fresh").returncode == 1
    preview = restore(archive, tmp_path / "fresh", "--dry-run")
    assert preview.returncode == 0 and preview.stdout.startswith("would restore")
    assert not (tmp_path / "fresh").exists()


def test_a_db_scope_archive_restores_the_database_alone(rich, tmp_path):
    done = restore(_backup_ok(rich, tmp_path / "db.tar.gz", "--scope", "db"), tmp_path / "dbonly")
    assert done.returncode == 0, done.stderr
    assert (
        f"the archive holds no config; point a config's state.path at {tmp_path / 'dbonly' / 'state' / 'ductile.db'}"
        in done.stdout
    )
    assert sorted(p.name for p in (tmp_path / "dbonly").iterdir()) == ["BACKUP_MANIFEST.txt", "state", "uid.txt"]
    with sqlite3.connect(tmp_path / "dbonly" / "state" / "ductile.db") as db:
        assert db.execute("SELECT plugin FROM job_queue").fetchall() == [("echo",)]


def test_restore_rewrites_only_the_path_keys_that_would_resolve_wrongly_and_keeps_comments(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(REPO / "plugins" / "echo", site / "plugins" / "echo")
    source = ConfigDir(site / "config")
    text = (
        "# Production gateway\n"
        "service:\n"
        "  max_workers: 2  # two cores\n"
        "state:\n"
        "  path: ../data/ductile.db   # the ledger lives beside the config\n"
        "plugin_roots: [../plugins]\n"
        "plugins:\n"
        "  echo: {config: {message: hi}}\n"
    )
    source.file("config.yaml", text)
    assert ductile(source, "plugin", "run", "echo").returncode == 0
    assert (site / "data" / "ductile.db").exists()

    # Scope config: the database comes along; the plugin root stays where it was.
    done = restore(_backup_ok(source, tmp_path / "config.tar.gz"), tmp_path / "r1")
    assert done.returncode == 0, done.stderr
    restored = (tmp_path / "r1" / "config" / "config.yaml").read_text()
    expected = text.replace("../data/ductile.db", "../state/ductile.db").replace(
        "[../plugins]", f"[{site / 'plugins'}]"
    )
    assert restored == expected
    assert "state.path: ../data/ductile.db -> ../state/ductile.db" in done.stdout
    moved = ConfigDir(tmp_path / "r1" / "config")
    assert [j["plugin"] for j in ductile_json(moved, "job", "logs")[1]["logs"]] == ["echo"]

    # Scope plugins: the plugin root comes along too, and the config points at the copy.
    assert (
        restore(_backup_ok(source, tmp_path / "plugins.tar.gz", "--scope", "plugins"), tmp_path / "r2").returncode == 0
    )
    restored = (tmp_path / "r2" / "config" / "config.yaml").read_text()
    assert restored == text.replace("../data/ductile.db", "../state/ductile.db").replace(
        "[../plugins]", "[../plugins/00-plugins]"
    )
    shutil.rmtree(site / "plugins")  # the original is gone: the restored instance has its own copy
    code, listed = ductile_json(ConfigDir(tmp_path / "r2" / "config"), "plugin", "run", "echo")
    assert code == 0 and listed["status"] == "succeeded"


def test_restore_reseals_what_matched_the_seal_under_the_new_paths_and_nothing_else(config_dir, tmp_path):
    config_dir.extra["include"] = ["plugins.yaml"]
    config_dir.file("plugins.yaml", "plugins:\n  echo: {config: {message: sealed}}\n")
    config_dir.write()
    assert ductile(config_dir, "config", "lock").returncode == 0
    assert ductile(config_dir, "plugin", "run", "echo").returncode == 0
    clean = _backup_ok(config_dir, tmp_path / "clean.tar.gz")
    (config_dir.path / "plugins.yaml").write_text("plugins:\n  echo: {config: {message: tampered}}\n")
    tampered = _backup_ok(config_dir, tmp_path / "tampered.tar.gz")

    done = restore(clean, tmp_path / "r1")
    assert done.returncode == 0 and "2 files re-sealed under their new paths" in done.stdout
    seal = yaml.safe_load((tmp_path / "r1" / "config" / ".checksums").read_text())
    assert sorted(seal["hashes"]) == [str(tmp_path / "r1" / "config" / n) for n in ("config.yaml", "plugins.yaml")]
    code, check = ductile_json(ConfigDir(tmp_path / "r1" / "config"), "config", "check")
    assert code == 0 and {f["status"] for f in check["files"]} == {"ok"}

    # A file that no longer matched its seal when backed up is not blessed by the restore.
    done = restore(tampered, tmp_path / "r2")
    assert done.returncode == 0 and "1 file re-sealed" in done.stdout
    assert f"not re-sealed: {config_dir.path / 'plugins.yaml'}: does not match .checksums" in done.stdout
    code, check = ductile_json(ConfigDir(tmp_path / "r2" / "config"), "config", "check")
    statuses = {Path(f["path"]).name: f["status"] for f in check["files"]}
    assert statuses == {"config.yaml": "ok", "plugins.yaml": "not sealed"}


@pytest.mark.postgres
def test_a_backup_taken_while_the_daemon_runs_restores_and_starts_with_the_same_state(process_db, tmp_path):
    cfg = process_db
    cfg.plugins["stress"] = {
        "config": {},
        "retry": {"max_attempts": 1},
        "parallelism": 1,  # the state command counts invocations: one at a time
        "schedules": [{"id": "boom", "at": PAST, "payload": {"mode": "error"}}],
        "circuit_breaker": {"threshold": 1, "reset_after": "1h"},
    }
    cfg.write()
    fired = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "runscheduler", "--once", "--config-dir", str(cfg.path)],
        env=cli_env(cfg),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fired.returncode == 0, fired.stderr
    ledger(cfg, "enqueue", [{"plugin": "stress", "command": "state", "submitted_by": "cli"}] * 3)
    daemon = start_workers(cfg)
    try:
        wait_for(
            lambda: all(j["status"] in ("succeeded", "dead") for j in ledger(cfg)), timeout=60, what="the first jobs"
        )
        breakers = ductile_json(cfg, "system", "breaker")[1]
        assert breakers["breakers"][0]["state"] == "open"
        # Work in flight while the backup is taken.
        busy = [{"plugin": "stress", "command": "poll", "submitted_by": "cli", "payload": {"mode": "ok", "sleep": 0.3}}]
        ledger(cfg, "enqueue", busy * 12)
        before = {j["id"]: j for j in ledger(cfg)}
        archive = _backup_ok(cfg, tmp_path / "live.tar.gz", "--scope", "plugins")
        assert any(j["status"] != "succeeded" for j in ledger(cfg) if j["id"] in before)  # it really was busy
        wait_for(lambda: all(j["status"] == "succeeded" for j in ledger(cfg)[-12:]), timeout=60, what="the busy jobs")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)

    done = restore(archive, tmp_path / "restored")
    assert done.returncode == 0, done.stderr
    assert "start it with: ductile system start --config-dir" in done.stdout
    restored = ConfigDir(tmp_path / "restored" / "config")  # its own SQLite file, whatever the source was
    after = {j["id"]: j for j in ledger(restored)}
    assert set(after) == set(before)
    for job_id, job in before.items():
        if job["status"] in ("succeeded", "dead"):
            assert after[job_id] == job  # status, attempts, worker, errors and every transition
    assert ductile_json(restored, "system", "breaker")[1] == breakers
    # The restored daemon takes over: queued jobs run, and running ones (their worker is gone) recover.
    daemon = start_workers(restored)
    try:
        wait_for(
            lambda: all(j["status"] in ("succeeded", "dead") for j in ledger(restored)),
            timeout=90,
            what="the restored daemon to finish the jobs it inherited",
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    inherited = [j for j in ledger(restored) if before[j["id"]]["status"] not in ("succeeded", "dead")]
    assert inherited and all(j["status"] == "succeeded" for j in inherited)
    # Plugin facts: the stress counter carries on from the three runs before the backup.
    code, ran = ductile_json(restored, "plugin", "run", "stress", "--command", "state")
    assert code == 0 and ran["result"]["state_updates"] == {"count": 4}


@pytest.mark.postgres
def test_restore_with_database_url_loads_an_empty_database_and_refuses_a_used_one(process_db, tmp_path):
    if not process_db.database_url:
        pytest.skip("needs PostgreSQL")
    import psycopg

    base, _, _ = process_db.database_url.rpartition("/")
    targets = [f"{base}/{Path(process_db.database_url).name}_r{n}" for n in range(2)]
    with psycopg.connect(process_db.database_url, autocommit=True) as conn:
        for url in targets:
            conn.execute(f"CREATE DATABASE {url.rpartition('/')[2]}")
    try:
        process_db.write()
        ledger(process_db, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}] * 2)
        exported = _backup_ok(process_db, tmp_path / "pg.tar.gz")
        lite = ConfigDir(tmp_path / "lite")  # a SQLite instance, restored into PostgreSQL
        lite.write()
        ledger(lite, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}])
        snapshot = _backup_ok(lite, tmp_path / "lite.tar.gz")
        for archive, url, source in ((exported, targets[0], process_db), (snapshot, targets[1], lite)):
            done = restore(archive, tmp_path / f"into-{url[-2:]}", database_url=url)
            assert done.returncode == 0, done.stderr
            restored = ConfigDir(tmp_path / f"into-{url[-2:]}" / "config")
            restored.database_url = url
            assert ledger(restored) == ledger(source)
        again = restore(exported, tmp_path / "again", database_url=targets[0])
        assert again.returncode == 1 and "already holds a ledger" in again.stderr
        assert not (tmp_path / "again").exists()
    finally:
        with psycopg.connect(process_db.database_url, autocommit=True) as conn:
            for url in targets:
                conn.execute(f"DROP DATABASE IF EXISTS {url.rpartition('/')[2]} WITH (FORCE)")


def test_only_a_token_written_as_is_is_warned_of_not_a_var_reference(config_dir, tmp_path):
    """Issue 36: every config with an inline token was warned "a literal token (not ${VAR}) is in
    the archive", the demo's `token: ${DUCTILE_DEMO_TOKEN}` too."""
    config_dir.extra["api"] = {
        "enabled": False,
        "auth": {
            "tokens": [
                {"name": "by-name", "token": "${BACKUP_TEST_TOKEN}", "scopes": ["*"]},
                {"name": "as-is", "token": "a-literal-secret-1234", "scopes": ["jobs:ro"]},
            ]
        },
    }
    config_dir.write()
    done = ductile(
        config_dir,
        "system",
        "backup",
        "--to",
        str(tmp_path / "b.tar.gz"),
        "--dry-run",
        "--json",
        BACKUP_TEST_TOKEN="from-the-environment",
    )
    assert done.returncode == 0, done.stderr
    tokens = [w for w in json.loads(done.stdout)["warnings"] if "token" in w and "api.auth" in w]
    line = (config_dir.path / "config.yaml").read_text().splitlines().index("    - name: as-is") + 2
    assert tokens == [
        f"api.auth.tokens[1].token ({config_dir.path / 'config.yaml'}:{line}) is a literal token, not a ${{VAR}} "
        "reference: the archive holds it in plain text"
    ]
