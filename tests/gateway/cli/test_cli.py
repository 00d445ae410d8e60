"""The NOUN ACTION CLI as an agent drives it: `--json`, exit codes that mean something, errors that
say where. Each test runs the real command in a subprocess against its own config directory."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from tests.support.processes import ductile, ductile_json, imported_modules, ledger

pytestmark = pytest.mark.process


@pytest.fixture
def cfg(config_dir):
    config_dir.write()
    return config_dir


def test_first_command_creates_and_migrates_a_fresh_database(cfg):
    assert not cfg.db_path.exists()
    code, status = ductile_json(cfg, "system", "status")
    assert code == 0 and status["status"] == "ok" and cfg.db_path.exists()
    assert status["plugins_loaded"] == 4 and status["queue_depth"] == 0
    with sqlite3.connect(cfg.db_path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # The spec's operator queries run unchanged.
        db.execute("SELECT status, COUNT(*) FROM job_queue GROUP BY status").fetchall()
        db.execute(
            "SELECT plugin, command, started_at FROM job_queue WHERE status = 'running' "
            "AND started_at < datetime('now', '-1 hour')"
        ).fetchall()
        db.execute(
            "SELECT seq, created_at, fact_type, job_id, command, fact_json FROM plugin_facts "
            "WHERE plugin_name = 'file_watch' ORDER BY CASE WHEN seq IS NULL THEN 1 ELSE 0 END ASC, "
            "seq DESC, created_at DESC LIMIT 20"
        ).fetchall()
        db.execute("SELECT job_id, plugin, attempt, dur_ns, status FROM job_stopwatch ORDER BY id DESC LIMIT 20")


@pytest.mark.parametrize(
    ("unrecorded", "named"),
    [
        ("app = 'ledger'", 0),  # the message names the first pending ones
        # One migration, the newest: what an upgrade leaves, and what start-up's quick look at the
        # recorded names must see as well as the full plan does (gateway.storage.database).
        ("id = (SELECT MAX(id) FROM django_migrations WHERE app = 'ledger')", -1),
    ],
)
def test_database_behind_the_code_is_refused_with_the_command_that_migrates_it(cfg, unrecorded, named):
    assert ductile(cfg, "system", "status").returncode == 0
    with sqlite3.connect(cfg.db_path) as db:
        ledger_migrations = [name for (name,) in db.execute("SELECT name FROM django_migrations WHERE app = 'ledger'")]
        db.execute(f"DELETE FROM django_migrations WHERE {unrecorded}")
    proc = ductile(cfg, "system", "status")
    assert proc.returncode == 78
    assert "behind this version" in proc.stderr and "ductile migrate --config-dir" in proc.stderr
    assert f"ledger.{ledger_migrations[named]}" in proc.stderr


def test_workers_started_first_migrate_a_fresh_database_and_refuse_one_behind(cfg):
    """`runworkers` starts on a few apps (ductile_site/settings_worker.py), which cannot load the
    migration graph: on a database that is not current it starts again on every app, and migrates
    a fresh one whole (the admin's and django-q2's tables too) or refuses one behind, as any
    command does."""
    assert not cfg.db_path.exists()
    first = ductile(cfg, "runworkers", "--once")
    assert first.returncode == 0, first.stderr
    with sqlite3.connect(cfg.db_path) as db:
        migrated = {app for (app,) in db.execute("SELECT DISTINCT app FROM django_migrations")}
    assert {"admin", "auth", "django_q", "ledger", "sessions"} <= migrated
    code, status = ductile_json(cfg, "system", "status")
    assert code == 0 and status["status"] == "ok"
    with sqlite3.connect(cfg.db_path) as db:
        newest = db.execute("SELECT MAX(name) FROM django_migrations WHERE app = 'ledger'").fetchone()[0]
        db.execute("DELETE FROM django_migrations WHERE app = 'ledger' AND name = ?", (newest,))
    behind = ductile(cfg, "runworkers", "--once")
    assert behind.returncode == 78
    assert "behind this version" in behind.stderr and f"ledger.{newest}" in behind.stderr


def test_workers_start_without_the_web_and_housekeeping_apps(cfg):
    """What the worker's settings leave out (~45 ms of its start, with croniter's, which also
    spawned `file`): on a current database, nothing of the admin, DRF or django-q2 is imported.
    Nor what only a web process's set-up uses (gateway.bootstrap.run_gateway_command, ~15 ms): the
    URL resolver, Django's default log handlers with the mail and debug-page modules they load.
    Its lines are the gateway's JSON all the same."""
    assert ductile(cfg, "system", "status").returncode == 0
    run = ductile(cfg, "runworkers", "--once", PYTHONPROFILEIMPORTTIME="1")
    assert run.returncode == 0, run.stderr[-2000:]
    imported = imported_modules(run.stderr)
    assert "ledger.models.jobs" in imported and "gateway.execution.workers" in imported
    assert not {"django.contrib.admin", "rest_framework", "django_q", "croniter"} & imported
    assert not {"django.urls", "django.core.mail", "django.views.debug"} & imported
    # Nor Django's migration machinery, on a database whose every migration is applied; nor RE2
    # (no `regex` condition in this config) or the scheduler's timing rules.
    assert not {m for m in imported if m.startswith("django.db.migrations")}
    assert not {"re2", "gateway.scheduler.timing"} & imported
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert lines[-1]["component"] == "workers" and lines[-1]["message"].startswith("runworkers stopped after")


def test_workers_take_the_settings_named_on_their_command_line(cfg):
    """`--settings` is read before the settings are, as in any Django command: here the full
    settings, whose apps include the admin."""
    assert ductile(cfg, "system", "status").returncode == 0
    run = ductile(cfg, "runworkers", "--once", "--settings", "ductile_site.settings", PYTHONPROFILEIMPORTTIME="1")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "django.contrib.admin" in imported_modules(run.stderr)


def test_workers_hand_the_gil_back_every_half_millisecond(cfg):
    """As the API's workers do (ledger.writes.group_commit.hand_the_gil_back_sooner): a worker thread whose
    plugin has exited, or that waits behind the write gate's holder, gets the GIL within 0.5 ms
    instead of Python's 5 ms (throughput +3.5 %, docs/performance-history.md item 40)."""
    import subprocess
    import sys

    from ledger.writes.group_commit import GIL_SWITCH_SECONDS
    from tests.support.checkout import REPO
    from tests.support.processes import cli_env

    assert ductile(cfg, "system", "status").returncode == 0
    script = (
        "import sys; from gateway.cli.main import main; "
        f"code = main(['manage.py', 'runworkers', '--once', '--config-dir', {str(cfg.path)!r}]); "
        "print('switch interval', sys.getswitchinterval()); sys.exit(code)"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=cli_env(cfg), cwd=REPO, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"switch interval {GIL_SWITCH_SECONDS}" in run.stdout


def test_config_dir_from_environment(cfg):
    proc = ductile(cfg, "plugin", "list", "--json")
    assert proc.returncode == 0
    import subprocess
    import sys

    from tests.support.checkout import REPO
    from tests.support.processes import cli_env

    env = cli_env(cfg, DUCTILE_CONFIG_DIR=str(cfg.path))
    out = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "plugin", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0 and json.loads(out.stdout)["plugins"]


def test_invalid_config_exits_78_naming_file_line_and_key(cfg):
    (cfg.path / "config.yaml").write_text(
        (cfg.path / "config.yaml").read_text().replace("max_workers: 2", "max_workers: two")
    )
    proc = ductile(cfg, "plugin", "list")
    assert proc.returncode == 78
    assert "config.yaml:2" in proc.stderr and "service.max_workers" in proc.stderr
    code, body = ductile_json(cfg, "plugin", "list")
    assert code == 78 and body["problems"][0]["key"] == "service.max_workers"


def test_plugin_list_json_shows_loaded_skipped_and_unconfigured(cfg):
    cfg.plugins["broken"] = {"uses": "sys_exec", "config": {}}  # missing required `command`
    cfg.write()
    code, body = ductile_json(cfg, "plugin", "list")
    assert code == 0
    configured = {p["name"] for p in body["plugins"] if p["state"] != "available"}
    assert configured == {"echo", "stress", "probe", "py-greet"}
    assert {p["name"]: p["health"] for p in body["plugins"] if p["state"] == "available"}["fetch"] == "ready"
    assert body["skipped"][0]["name"] == "broken" and "command" in body["skipped"][0]["reason"]
    echo = next(p for p in body["plugins"] if p["name"] == "echo")
    assert echo["commands"] == ["poll", "handle", "health"] and echo["state"] == "enabled"


def test_plugin_list_says_why_health_is_unknown_and_check_asks(cfg):
    """Issue 36: every plugin showed HEALTH unknown with nothing saying why or what to do."""
    listed = ductile(cfg, "plugin", "list").stdout
    assert "echo                     enabled   0.3.0       2 unknown" in listed
    assert listed.rstrip().endswith(
        "unknown health: no answer to its health command recorded yet; `plugin list --check` asks now"
    )
    checked = ductile(cfg, "plugin", "list", "--check").stdout
    assert "echo                     enabled   0.3.0       2 healthy" in checked
    assert "unknown health" not in checked


def test_plugin_run_prints_result_and_exit_code_follows_the_job(cfg):
    code, body = ductile_json(cfg, "plugin", "run", "echo", "--payload", '{"message": "agent"}')
    assert code == 0 and body["status"] == "succeeded" and body["result"]["result"] == "Echoed: agent"
    code, body = ductile_json(cfg, "plugin", "run", "stress", "--payload", '{"mode": "retry_false"}')
    assert code == 1 and body["status"] == "failed" and body["error"] == "permanent input error"


def test_plugin_run_usage_errors_exit_2(cfg):
    assert ductile(cfg, "plugin", "run", "nope").returncode == 2
    assert ductile(cfg, "plugin", "run", "echo", "--command", "nope").returncode == 2
    proc = ductile(cfg, "plugin", "run", "echo", "--payload", "{not json")
    assert proc.returncode == 2 and "--payload is not valid JSON" in proc.stderr
    assert ductile(cfg, "plugin", "frobnicate").returncode == 2


def test_plugin_run_payload_file_and_dedupe(cfg, tmp_path):
    payload = tmp_path / "p.json"
    payload.write_text('{"message": "from file"}')
    code, first = ductile_json(cfg, "plugin", "run", "echo", "--payload-file", str(payload), "--dedupe-key", "d1")
    assert code == 0 and first["result"]["result"] == "Echoed: from file"
    code, again = ductile_json(cfg, "plugin", "run", "echo", "--dedupe-key", "d1")
    assert code == 0 and again["deduplicated"] is True and again["job_id"] == first["job_id"]


def test_a_cli_run_leaves_no_worker_row(cfg):
    """Issue 36: each `plugin run` left a `HOST:PID:cli:…` row among the workers, stopped."""
    code, run = ductile_json(cfg, "plugin", "run", "echo")
    assert code == 0 and run["status"] == "succeeded"
    with sqlite3.connect(cfg.db_path) as db:
        assert db.execute("SELECT id, state FROM worker_instances").fetchall() == []
        # It did run as a claimant of its own, named in the job's transitions.
        claimed = db.execute("SELECT reason FROM job_transitions WHERE to_status = 'running'").fetchall()
    assert [reason.split(":")[-2] for (reason,) in claimed] == ["cli"]


def test_plugin_run_no_wait_leaves_the_job_queued(cfg):
    code, body = ductile_json(cfg, "plugin", "run", "echo", "--no-wait")
    assert code == 0 and body["status"] == "queued"
    assert [j["status"] for j in ledger(cfg)] == ["queued"]


def test_plugin_run_dry_run_checks_and_shows_the_job_and_enqueues_nothing(cfg):
    code, body = ductile_json(cfg, "plugin", "run", "echo", "--payload", '{"message": "x"}', "--dry-run")
    assert code == 0 and body["dry_run"] is True
    assert (body["plugin"], body["command"], body["payload"], body["timeout_seconds"]) == (
        "echo",
        "poll",
        {"message": "x"},
        60,
    )
    assert ledger(cfg) == []
    assert ductile(cfg, "plugin", "run", "echo", "--command", "nope", "--dry-run").returncode == 2


def test_plugin_run_of_a_plugin_that_does_not_exist_says_so_and_lists_those_that_do(cfg):
    """Issue 36: `plugin run nosuch` said "not configured", as if adding it to the config would do."""
    proc = ductile(cfg, "plugin", "run", "nosuch")
    assert proc.returncode == 2
    assert "plugin 'nosuch' does not exist: the configured plugins are echo, probe, py-greet, stress" in proc.stderr
    # A plugin the roots hold but the config does not name: that one is only not configured.
    proc = ductile(cfg, "plugin", "run", "fetch")
    assert proc.returncode == 2
    assert "plugin 'fetch' cannot run: it is not configured (found in plugin_roots; add it under plugins:)" in (
        proc.stderr
    )


def test_job_inspect_shows_transitions_attempts_and_children(cfg):
    cfg.routes = [{"from": "echo", "event_type": "echo.poll", "to": "probe"}]
    cfg.write()
    _, run = ductile_json(cfg, "plugin", "run", "echo")
    code, job = ductile_json(cfg, "job", "inspect", run["job_id"])
    assert code == 0
    assert [t["to"] for t in job["transitions"]] == ["queued", "running", "succeeded"]
    assert job["attempts"][0]["result"]["result"] == "Echoed: hi"
    assert job["children"][0]["plugin"] == "probe" and job["children"][0]["status"] == "queued"
    assert job["stopwatch"][0]["status"] == "ok"
    code, child = ductile_json(cfg, "job", "inspect", job["children"][0]["job_id"])
    assert child["parent"]["job_id"] == run["job_id"]
    text = ductile(cfg, "job", "inspect", run["job_id"]).stdout
    assert "queued -> running" in text
    tree = text.split("tree:\n", 1)[1].splitlines()
    assert tree[0].split() == ["succeeded", "echo.poll", run["job_id"], "<-", "this", "job"]
    assert tree[1].startswith("    ") and tree[1].split() == ["queued", "probe.handle", job["children"][0]["job_id"]]
    assert ductile(cfg, "job", "inspect", "no-such-id").returncode == 1


def test_job_logs_filters(cfg):
    ductile(cfg, "plugin", "run", "echo")
    ductile(cfg, "plugin", "run", "stress", "--payload", '{"mode": "retry_false"}')
    code, body = ductile_json(cfg, "job", "logs", "--status", "error")
    assert code == 0 and body["total"] == 1 and body["logs"][0]["plugin"] == "stress"
    assert "result" not in body["logs"][0]
    _, found = ductile_json(cfg, "job", "logs", "--query", "permanent input", "--include-result")
    assert found["total"] == 1 and found["logs"][0]["result"]["error"] == "permanent input error"
    _, by_plugin = ductile_json(cfg, "job", "logs", "--plugin", "echo", "--from", "2000-01-01T00:00:00Z")
    assert by_plugin["total"] == 1
    assert ductile(cfg, "job", "logs", "--from", "yesterday").returncode == 2
    assert ductile(cfg, "job", "logs", "--limit", "500").returncode == 2
    assert ductile(cfg, "job", "logs", "--status", "weird").returncode == 2


def test_version_json(cfg):
    code, body = ductile_json(cfg, "version")
    assert code == 0 and body["protocol"] == 2


def test_ductile_console_script_runs_the_same_commands(cfg):
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.processes import cli_env

    exe = Path(sys.executable).parent / "ductile"  # installed by `pip install -e .` (scripts/test)
    out = subprocess.run(
        [str(exe), "version", "--json", "--config-dir", str(cfg.path)],
        capture_output=True,
        text=True,
        env=cli_env(cfg),
        timeout=60,
    )
    assert out.returncode == 0 and json.loads(out.stdout)["protocol"] == 2


def test_a_command_runs_with_the_garbage_collector_on(cfg):
    # The CLI switches the collector off for its start-up only (gateway.cli.main): a command, a
    # daemon above all, that ran without it would keep every reference cycle it made.
    proc = ductile(cfg, "shell", "--no-imports", "-c", "import gc; print(gc.isenabled(), gc.get_threshold()[0] > 0)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]


@pytest.mark.parametrize(
    ("level", "override", "shown"),
    [
        ("warn", None, {"WARNING"}),
        ("ERROR", None, set()),
        ("debug", None, {"DEBUG", "INFO", "WARNING"}),
        ("warn", "info", {"INFO", "WARNING"}),  # DUCTILE_LOG_LEVEL, one process tree's override
    ],
)
def test_service_log_level_chooses_which_lines_the_gateway_writes(cfg, level, override, shown):
    """`service.log_level` (spec 000 §11.4): a job that succeeds logs at INFO, one that fails at
    WARNING; below the level, a line is not written."""
    lines = run_a_success_and_a_failure(cfg, level, override)
    assert {line["level"] for line in lines if line.get("plugin") in ("echo", "stress")} == shown


def run_a_success_and_a_failure(cfg, level: str, override: str | None) -> list[dict]:
    """`runworkers --once` on an echo job and a failing stress job under `service.log_level`
    `level` (and DUCTILE_LOG_LEVEL `override`): its log lines."""
    cfg.service["log_level"] = level
    cfg.write()
    ledger(
        cfg,
        "enqueue",
        [
            {"plugin": "echo", "command": "poll", "submitted_by": "cli"},
            {"plugin": "stress", "command": "poll", "submitted_by": "cli", "payload": {"mode": "error"}},
        ],
    )
    env: dict[str, Any] = {"DUCTILE_LOG_LEVEL": override} if override else {}
    run = ductile(cfg, "runworkers", "--once", **env)
    assert run.returncode == 0, run.stderr[-2000:]
    return [json.loads(line) for line in run.stdout.splitlines()]


def test_an_unknown_log_level_override_is_said_and_the_config_level_applies(cfg):
    """DUCTILE_LOG_LEVEL=verbose names no level: a line says which variable and value were
    ignored, and service.log_level still decides (before, INFO applied silently)."""
    lines = run_a_success_and_a_failure(cfg, "warn", "verbose")
    said = [line for line in lines if "DUCTILE_LOG_LEVEL" in line["message"]]
    assert len(said) == 1 and "'verbose'" in said[0]["message"] and "'warn'" in said[0]["message"], lines
    assert {line["level"] for line in lines if line.get("plugin") in ("echo", "stress")} == {"WARNING"}


def test_one_text_line_per_job_with_where_it_routed_under_the_format_override(cfg):
    """Issue 36: the demo's terminal printed two JSON lines per job (the outcome, then a line per
    routed child). DUCTILE_LOG_FORMAT=text overrides `service.log_format` (json here) for one
    process tree, and a job's one line names where it routed."""
    import shlex

    cfg.routes = [{"from": "echo", "event_type": "echo.poll", "to": "probe"}]
    cfg.write()
    ledger(cfg, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}])
    run = ductile(cfg, "runworkers", "--once", DUCTILE_LOG_FORMAT="text")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [dict(pair.split("=", 1) for pair in shlex.split(line)) for line in run.stdout.splitlines()]
    [echo] = [line for line in lines if line.get("plugin") == "echo"]
    assert echo["msg"] == "job succeeded: poll; routed echo.poll to probe.handle"
    [probe] = [line for line in lines if line.get("plugin") == "probe"]
    assert probe["msg"] == "job succeeded: handle"
    jobs = [line["job_id"] for line in lines if "job_id" in line]
    assert echo["job_id"] in jobs and len(jobs) == len(set(jobs))  # one line per job (stress's `init` too)

    unknown = ductile(cfg, "runworkers", "--once", DUCTILE_LOG_FORMAT="yaml")
    said = [json.loads(line) for line in unknown.stdout.splitlines()]
    assert [line["message"] for line in said if "DUCTILE_LOG_FORMAT" in line["message"]] == [
        "DUCTILE_LOG_FORMAT='yaml' is not a log format (json, text); it is ignored and "
        "service.log_format 'json' applies"
    ]


def test_service_log_format_text_writes_key_value_lines_for_a_person(cfg):
    """`service.log_format: text`: the same fields as `key=value` pairs, the time first, a value
    with a space quoted (as Go's slog text handler writes them); JSON stays the default."""
    import shlex

    cfg.service["log_format"] = "text"
    cfg.write()
    ledger(cfg, "enqueue", [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}])
    run = ductile(cfg, "runworkers", "--once")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [dict(pair.split("=", 1) for pair in shlex.split(line)) for line in run.stdout.splitlines()]
    assert all(list(line)[:4] == ["time", "level", "component", "msg"] for line in lines), run.stdout
    done = [line for line in lines if line.get("plugin") == "echo" and line["msg"] == "job succeeded: poll"]
    assert len(done) == 1 and done[0]["level"] == "INFO" and done[0]["component"] == "dispatch"
    assert 'msg="job succeeded: poll"' in run.stdout
