"""`system migrate-ledger --to URL` as an operator moving a one-box install to a cluster runs it: a
SQLite ledger with jobs in every state, a pipeline's event_context rows, attempts, logs, facts,
schedules, breakers, a config snapshot, a console account with its role and the admin's record of
an action, copied into a real PostgreSQL; afterwards every table holds the same rows there, `job
inspect` and `job logs` tell the same story on either database, and the gateway goes on writing on
PostgreSQL. And what it refuses: a target that holds a ledger (unless --replace), a source a
gateway or workers still run on, a URL that is not PostgreSQL's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.console_setup import PASSWORD, audit_config, audit_payload
from tests.support.output import Output
from tests.support.processes import cli_env, ductile, ductile_json, start_workers, stop_gracefully
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres

PAST = "2026-01-01T00:00:00Z"

# Run once on the SQLite ledger, in a process of its own (the test's database is another one): the
# worker loop of the suite (run_until_idle) runs real plugin processes.
_SEED = """
import sys
from gateway.bootstrap import prepare_process
prepare_process(sys.argv[1])
import django
django.setup()
from gateway.storage.database import ensure_schema
ensure_schema()
import json
from axes.models import AccessFailureLog
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from gateway.daemon.config_snapshots import record_config
from gateway.daemon.scheduler import Scheduler
from gateway.intake.events import publish_event
from gateway.operations.accounts import save_account
from gateway.runtime import RUNTIME
from ledger.models import Job, JobSpec, JobTransition
from ledger.submitters import Submitter
from tests.support.jobs import run_jobs, run_until_idle

runtime = RUNTIME.get()
record_config(runtime, "start")
Scheduler(RUNTIME, once=True).run()
publish_event(runtime, "audit.start", json.loads(sys.argv[2]), submitter=Submitter.CLI)
run_jobs(RUNTIME, [
    ("echo", "poll", {"n": 1}),
    ("noisy", "handle", {"fail": True}),
    ("stress", "poll", {"mode": "crash"}),
    ("stress", "poll", {"mode": "retry_false"}),
    ("stress", "poll", {"sleep": 3}),
])
run_until_idle(RUNTIME)
spec = JobSpec(plugin="echo", command="poll", submitter=Submitter.CLI, payload={"left": "queued"})
queued = [Job.objects.enqueue(spec, default_dedupe_ttl=0).job_id for _ in range(3)]
Job.objects.claim_next(worker_id="gone-host:1:abc", caps={"echo": 1}, lease_ttl=3600)
Job.objects.get(pk=queued[1]).cancel(by="cli")
save_account("ada", "operator", sys.argv[3])
LogEntry.objects.create(
    user=User.objects.get(username="ada"), content_type=ContentType.objects.get_for_model(Job), object_id=queued[1],
    object_repr=queued[1], action_flag=CHANGE, change_message="cancelled",
)
AccessFailureLog.objects.create(
    username="mallory", ip_address="127.0.0.1", user_agent="curl", http_accept="*/*",
    path_info="/admin/login/", locked_out=False,
)
resting = sorted(set(Job.objects.values_list("status", flat=True)))
passed = sorted(set(JobTransition.objects.values_list("to_status", flat=True)))
print(json.dumps([resting, passed]))
"""

# Every table the move fills, as Django reads it: rows in id order, a value by its field (JSON
# parsed, a time as an aware datetime); the tables copied by natural key as Django's serializer
# gives them with natural keys (a user's groups by name, a record's content type by its model).
_DUMP = """
import sys
from gateway.bootstrap import prepare_process
prepare_process(sys.argv[1])
import django
django.setup()
import json
from django.apps import apps
from django.core import serializers
from gateway.operations.ledger_move import BY_NATURAL_KEY, copied_models
natural = [apps.get_model(label) for label in BY_NATURAL_KEY]
owned = {f.remote_field.through for m in natural for f in m._meta.local_many_to_many}
dump = {}
for model in copied_models():
    rows = model._base_manager.order_by("pk")
    if model in natural:
        dump[model._meta.db_table] = serializers.serialize("python", rows, use_natural_foreign_keys=True)
    elif model not in owned:
        dump[model._meta.db_table] = list(rows.values())
print(json.dumps(dump, default=str, sort_keys=True))
"""


def run_script(cfg: ConfigDir, script: str, database: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, str(cfg.path), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=cli_env(cfg, DATABASE_URL=database),
        cwd=REPO,
    )


def dump(cfg: ConfigDir, database: str) -> dict:
    proc = run_script(cfg, _DUMP, database)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def on(cfg: ConfigDir, database: str, *args: str) -> tuple[int, Any]:
    """A `ductile` command on `database` (the gateway's DATABASE_URL)."""
    return ductile_json(cfg, *args, DATABASE_URL=database)


@pytest.fixture
def postgres_databases(process_db):
    """Empty databases on the suite's PostgreSQL server, dropped afterwards."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pytest.skip("moves a ledger into PostgreSQL: runs on the suite's PostgreSQL run (DATABASE_URL)")
    import psycopg

    base = url.rpartition("/")[0]
    names: list[str] = []

    def make() -> str:
        names.append(f"ductile_m_{uuid.uuid4().hex[:10]}")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {names[-1]}")
        return f"{base}/{names[-1]}"

    yield make
    with psycopg.connect(url, autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def sqlite_box(tmp_path) -> ConfigDir:
    """A one-box install's config and SQLite ledger (whatever database the suite runs on)."""
    cfg = audit_config(ConfigDir(tmp_path / "box"))
    cfg.plugins["stress"].update(timeout="1s", schedules=[{"id": "once", "at": PAST, "payload": {"mode": "ok"}}])
    cfg.write()
    return cfg


def sqlite_url(cfg: ConfigDir) -> str:
    return f"sqlite:///{cfg.db_path}"


def test_a_ledger_in_every_state_moves_to_postgresql_and_tells_the_same_story(sqlite_box, postgres_databases):
    cfg, target = sqlite_box, postgres_databases()
    seeded = run_script(cfg, _SEED, sqlite_url(cfg), json.dumps(audit_payload()), PASSWORD)
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    # Jobs resting in every state but timed_out (a timeout is retried: it rests as queued or dead),
    # and transitions through every state.
    resting, passed = json.loads(seeded.stdout.strip().splitlines()[-1])
    assert resting == sorted(["queued", "running", "succeeded", "failed", "dead"])
    assert passed == sorted(["queued", "running", "succeeded", "failed", "timed_out", "dead"])
    before = dump(cfg, sqlite_url(cfg))
    for table in ("job_queue", "event_context", "job_log", "job_attempts", "plugin_facts", "plugin_state"):
        assert before[table], f"the seeded ledger has no {table} rows"
    for table in ("schedule_entries", "circuit_breakers", "config_snapshots", "auth_user", "django_admin_log"):
        assert before[table], f"the seeded ledger has no {table} rows"

    # A dry run counts and changes nothing: the target still has no tables.
    code, planned = ductile_json(cfg, "system", "migrate-ledger", "--to", target, "--dry-run")
    assert code == 0, planned
    assert planned["dry_run"] is True and planned["schema"].startswith("would be created")
    counts = {t["table"]: t["rows"] for t in planned["tables"]}
    assert {table: len(rows) for table, rows in before.items()} == {t: counts[t] for t in before}

    # The move, into an empty (already migrated) database: every table the same, row for row.
    code, moved = ductile_json(cfg, "system", "migrate-ledger", "--to", target)
    assert code == 0, moved
    assert {t["table"]: t["rows"] for t in moved["tables"]} == counts
    assert moved["source"] == f"sqlite:{cfg.db_path}" and moved["target"].startswith("postgresql://")
    assert moved["schema"] == "migrated"
    assert dump(cfg, target) == before

    # The same story on either database.
    root = next(row["id"] for row in before["event_context"] if row["pipeline_name"] == "audit")
    jobs = [row["id"] for row in before["job_queue"]]
    pipeline_job = next(row["id"] for row in before["job_queue"] if row["event_context_id"] == root)
    one_of_each = {row["status"]: row["id"] for row in before["job_queue"]}
    for args in (
        ("job", "logs"),
        ("job", "inspect", pipeline_job),
        *(("job", "inspect", one_of_each[status]) for status in ("failed", "dead", "running")),
        ("system", "scheduler"),
        ("config", "snapshots"),
    ):
        here, there = on(cfg, sqlite_url(cfg), *args), on(cfg, target, *args)
        assert here == there, f"`{' '.join(args)}` differs after the move"
        assert here[0] == 0, here

    # Refused now that the target holds a ledger; --replace empties it and copies again.
    refused = ductile(cfg, "system", "migrate-ledger", "--to", target)
    assert refused.returncode == 1 and "already holds rows: " in refused.stderr, refused.stderr
    assert f"job_queue ({len(jobs)})" in refused.stderr
    assert "--replace" in refused.stderr
    code, again = ductile_json(cfg, "system", "migrate-ledger", "--to", target, "--replace")
    assert code == 0 and again["target_rows_before"]["job_queue"] == len(jobs), again
    assert dump(cfg, target) == before

    # The gateway goes on on PostgreSQL: new rows take ids past the copied ones (sequences reset).
    ran = ductile(cfg, "plugin", "run", "echo", DATABASE_URL=target)
    assert ran.returncode == 0, ran.stderr
    after = dump(cfg, target)
    assert max(r["id"] for r in after["job_transitions"]) > max(r["id"] for r in before["job_transitions"])
    assert len(after["job_queue"]) == len(jobs) + 1


def test_it_refuses_while_the_source_is_in_use_and_a_url_that_is_not_postgresql(sqlite_box, postgres_databases):
    cfg, target = sqlite_box, postgres_databases()
    wrong = ductile(cfg, "system", "migrate-ledger", "--to", "mysql://root:hunter2@db/ductile")
    assert wrong.returncode == 2 and "must be a PostgreSQL URL" in wrong.stderr
    assert "hunter2" not in wrong.stderr

    missing = ductile(cfg, "system", "migrate-ledger", "--to", target)
    assert missing.returncode == 1 and f"no SQLite ledger at {cfg.db_path}" in missing.stderr

    workers = start_workers(cfg)
    output = Output(workers)
    answers: list[tuple[int, Any]] = []

    def heartbeat() -> Any:
        assert workers.poll() is None, f"runworkers exited {workers.returncode}:\n{output.finish()[-3000:]}"
        answers.append(on(cfg, sqlite_url(cfg), "system", "status"))
        return answers[-1][1].get("workers")

    try:
        wait_for(
            heartbeat,
            timeout=60,
            what="the worker's heartbeat",
            explain=lambda: f"last status: {answers[-1:]}\nrunworkers said:\n{output.text}",
        )
        busy = ductile(cfg, "system", "migrate-ledger", "--to", target)
        assert busy.returncode == 1 and "node(s) are running on the source ledger" in busy.stderr, busy.stderr
    finally:
        stop_gracefully(workers)

    # A standalone scheduler alone (it enqueues into the source while it runs) is refused too:
    # it keeps a node row of its own (gateway.daemon.presence).
    scheduler = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "runscheduler", "--config-dir", str(cfg.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(cfg),
        cwd=REPO,
    )
    said = Output(scheduler)
    try:
        wait_for(
            lambda: [
                n for n in on(cfg, sqlite_url(cfg), "system", "status")[1].get("nodes", []) if n["liveness"] == "live"
            ],
            timeout=60,
            what="the scheduler's node row",
            explain=lambda: said.text,
        )
        busy = ductile(cfg, "system", "migrate-ledger", "--to", target)
        assert busy.returncode == 1 and "(scheduler)" in busy.stderr, busy.stderr
    finally:
        stop_gracefully(scheduler)
    code, status = on(cfg, sqlite_url(cfg), "system", "status")
    assert [n for n in status["nodes"] if n["liveness"] == "live"] == []  # it left as it stopped

    # A gateway's PID lock (`system start` writes it beside the ledger) naming a live process.
    pid_file = Path(cfg.db_path).parent / "ductile.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    try:
        running = ductile(cfg, "system", "migrate-ledger", "--to", target)
        assert running.returncode == 1 and "a gateway is running on" in running.stderr, running.stderr
    finally:
        pid_file.unlink()
    # Nothing was written into the target by any refusal.
    code, planned = ductile_json(cfg, "system", "migrate-ledger", "--to", target, "--dry-run")
    assert code == 0 and planned["schema"].startswith("would be created"), planned
