"""Issue 12, defect 10: a corrupted SQLite ledger was found only by `system selfcheck`, and
`runworkers` ran jobs on one. Every process that starts on the ledger (runworkers, runscheduler,
system start, the API's and the webhook listener's WSGI start-up) checks it first, and refuses
with the selfcheck's finding and a non-zero exit, never a traceback and never a job run."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gateway.storage.database import CHECKED_ENV, begin_integrity_check, file_stamp, verify_integrity
from tests.support.checkout import REPO
from tests.support.network import free_port
from tests.support.processes import cli_env, ductile, ductile_json, ledger

pytestmark = [pytest.mark.process]


# Two ledgers damaged in different places fail differently: on the first, SQLite cannot even open
# the file (its first PRAGMA says "database disk image is malformed"); the second opens, and
# quick_check reports the broken page. Both must be refused in the selfcheck's words.
LEDGERS = {
    "unopenable": ("quick_check could not read the database: ", 5, 295),
    "broken-page": ("PRAGMA quick_check reported: ", 300, 0),
}


@pytest.fixture(params=list(LEDGERS))
def corrupted(request, config_dir, tmp_path):
    """A ledger with queued jobs (each would leave a marker file if it ran), pages in the middle
    of its file overwritten."""
    marker = tmp_path / "m"
    marker.mkdir()
    port, hook_port = free_port(), free_port()
    config_dir.extra["api"] = {
        "listen": f"127.0.0.1:{port}",
        "auth": {"tokens": [{"name": "t", "token": "tok", "scopes": ["*"]}]},
    }
    config_dir.extra["tokens"] = [{"name": "hook", "key": "hook-secret"}]
    config_dir.extra["webhooks"] = {
        "listen": f"127.0.0.1:{hook_port}",
        "endpoints": [{"path": "/hook/echo", "plugin": "echo", "secret_ref": "hook", "signature_header": "X-Sig"}],
    }
    config_dir.plugins["stress"]["schedules"] = [{"every": "1s", "command": "poll"}]
    config_dir.write()
    finding, stress, echo = LEDGERS[request.param]
    payload = {"marker_dir": str(marker)}
    if not echo:  # rows long enough to lay the file out differently
        payload["pad"] = "x" * 500
    job = {"plugin": "stress", "command": "poll", "submitted_by": "cli", "payload": payload}
    ledger(
        config_dir, "enqueue", [job] * stress + [{"plugin": "echo", "command": "poll", "submitted_by": "cli"}] * echo
    )
    path = config_dir.db_path
    # Which pages are overwritten is chosen by what they hold, not by where they lie (the layout
    # moves with every migration): the schema's own pages past the first, so opening the file
    # fails, or the queue's, so it opens and the check finds them.
    owner = "sqlite_schema" if request.param == "unopenable" else "job_queue"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = db.execute("PRAGMA page_size").fetchone()[0]
        numbers = [n for (n,) in db.execute("SELECT pageno FROM dbstat WHERE name = ? AND pageno > 1", [owner])]
    assert numbers, f"no page of {owner} past the first"
    # The file as a `system start` would have passed its check on to its children before the damage.
    checked = file_stamp(str(path))
    time.sleep(0.05)  # the damage comes later than the check: past the clock tick file times are kept in
    with open(path, "r+b") as handle:
        for number in sorted(numbers)[:4]:
            handle.seek((number - 1) * page)  # dbstat counts pages from 1
            handle.write(bytes(range(256)) * (page // 256))
    return config_dir, marker, finding, checked


def refused(proc: subprocess.CompletedProcess[str]) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert "Traceback" not in text, text
    return text


def test_every_process_refuses_to_start_on_a_corrupted_ledger(corrupted):
    cfg, marker, finding_at_start, _ = corrupted
    code, report = ductile_json(cfg, "system", "selfcheck")
    [finding] = [c["detail"] for c in report["checks"] if c["name"] == "db_integrity"]
    assert code == 1 and "integrity_check" in finding, report
    # The start-up check runs the cheaper quick_check, and says it in the selfcheck's words.

    for argv in (["runworkers", "--once"], ["runscheduler", "--once"], ["system", "start"]):
        text = refused(ductile(cfg, *argv, timeout=60))
        assert "refuses to start" in text and finding_at_start in text, (argv, text)
        assert "ductile system selfcheck" in text, text

    # The API and the webhook listener, started by gunicorn as an operator might without the
    # supervisor: the worker refuses to load the app, and gunicorn stops.
    for app in ("ductile_site.wsgi:application", "gateway.http.webhooks.wsgi:application"):
        text = refused(gunicorn_start(cfg, app))
        assert "refuses to start" in text and finding_at_start in text, (app, text)

    assert not list(marker.iterdir()), "a job ran on the corrupted ledger"


def gunicorn_start(cfg, app: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gunicorn", "-c", str(REPO / "ductile_site" / "gunicorn.py")]
    return subprocess.run(
        [*argv, "--bind", f"127.0.0.1:{free_port()}", app],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(cfg, DUCTILE_CONFIG_DIR=str(cfg.path), **env),
        cwd=REPO,
    )


def test_a_check_handed_down_before_the_file_changed_does_not_let_a_process_start(corrupted):
    """`system start` hands its children the stamp of the file it checked, so that they need not
    read every page again; a stamp taken before the damage must not spare the damaged file."""
    cfg, marker, finding_at_start, checked = corrupted
    stale = {CHECKED_ENV: checked}
    for argv in (["runworkers", "--once"], ["runscheduler", "--once"], ["system", "start"]):
        text = refused(ductile(cfg, *argv, timeout=60, **stale))
        assert "refuses to start" in text and finding_at_start in text, (argv, text)
    text = refused(gunicorn_start(cfg, "ductile_site.wsgi:application", **stale))
    assert "refuses to start" in text and finding_at_start in text, text
    assert not list(marker.iterdir()), "a job ran on the corrupted ledger"


@pytest.fixture
def ledger_file(monkeypatch):
    """The in-process tests' own SQLite ledger, as `prepare_process` names a daemon's."""
    if connection.vendor != "sqlite":
        pytest.skip("the start-up check reads SQLite files only")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv(CHECKED_ENV, raising=False)
    monkeypatch.setenv("DUCTILE_DB_PATH", str(connection.settings_dict["NAME"]))
    return connection.settings_dict["NAME"]


def checks_made(step) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        step()
    return [q["sql"] for q in queries if "quick_check" in q["sql"]]


@pytest.mark.django_db
def test_a_daemons_check_begun_at_its_start_spares_the_check_on_its_connection(ledger_file):
    """The daemons and `system start` begin the check as they start (gateway.cli.main), on a
    thread beside their imports: the check on Django's connection, after them, is not made again
    for a file that passed and has not changed since."""
    assert checks_made(verify_integrity), "without a check begun early, it is made on the connection"
    begin_integrity_check()
    assert checks_made(verify_integrity) == []


@pytest.mark.django_db
def test_a_check_begun_before_the_file_changed_does_not_spare_it(ledger_file):
    begin_integrity_check()
    time.sleep(0.05)  # past the clock tick file times are kept in
    os.utime(ledger_file)  # a change since: a restore, a checkpoint, an edit
    assert checks_made(verify_integrity), "the changed file must be checked again"
