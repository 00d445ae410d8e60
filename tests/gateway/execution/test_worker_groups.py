"""Named worker groups (issue 38, "Roles"): `service.worker_groups: {media: [echo, probe]}` and
`runworkers --group media` claim only the group's plugins, beside `--plugins` (an unnamed group);
the worker's row names its group and plugins; a reload that changes the group's plugins
moves a running worker to them. (Its version, recorded once it runs: tests/processes/
test_nodes_browser.py.)"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading

import pytest

from gateway.execution.workers import WorkerDaemon
from ledger.models import Job, JobSpec, WorkerInstance
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.processes import ductile, ledger
from tests.support.runtime import load_runtime


def drive(daemon: WorkerDaemon) -> None:
    """One pass of the daemon's pool thread, as `runworkers --once` makes (tests.support.run_until_idle)."""
    thread = threading.Thread(target=daemon.work, name="ductile-test-worker")
    thread.start()
    thread.join()


@pytest.mark.django_db(transaction=True)
def test_a_reload_moves_a_group_worker_to_the_groups_new_plugins(config_dir):
    config_dir.service["worker_groups"] = {"media": ["echo"]}
    holder = load_runtime(config_dir)
    daemon = WorkerDaemon(holder, threads=1, plugins=["echo"], group="media", once=True, install_signals=False)
    WorkerInstance.objects.register(
        daemon.worker_id, hostname=socket.gethostname(), pid=os.getpid(), threads=1, plugins="echo", group="media"
    )
    probe = Job.objects.enqueue(JobSpec("probe", "poll", Submitter.CLI), default_dedupe_ttl=0).job_id
    drive(daemon)
    assert Job.objects.get(pk=probe).status == JobStatus.QUEUED  # not the group's plugin
    config_dir.service["worker_groups"] = {"media": ["echo", "probe"]}
    config_dir.write()
    assert daemon.reload()
    assert WorkerInstance.objects.get(pk=daemon.worker_id).plugins == "echo,probe"
    drive(daemon)
    assert Job.objects.get(pk=probe).status == JobStatus.SUCCEEDED
    # A reload that drops the group keeps what the worker claims, and says so in its log.
    config_dir.service.pop("worker_groups")
    config_dir.write()
    assert daemon.reload()
    assert daemon.plugins == {"echo", "probe"}


@pytest.mark.process
def test_runworkers_group_runs_only_its_plugins_and_its_row_says_which(config_dir):
    config_dir.service["worker_groups"] = {"media": ["echo", "probe"]}
    config_dir.write()
    ledger(config_dir, "enqueue", [{"plugin": "echo", "command": "poll"}, {"plugin": "stress", "command": "poll"}])
    run = ductile(config_dir, "runworkers", "--group", "media", "--once")
    assert run.returncode == 0, run.stderr
    jobs = [(job["plugin"], job["command"], job["status"]) for job in ledger(config_dir)]
    # stress's poll, and the init its start-up enqueued (stress has one), wait for a node that runs stress.
    assert jobs == [("echo", "poll", "succeeded"), ("stress", "poll", "queued"), ("stress", "init", "queued")]
    with sqlite3.connect(config_dir.db_path) as db:
        rows = db.execute("SELECT worker_group, plugins, threads FROM worker_instances").fetchall()
    assert rows == [("media", "echo,probe", 2)]
    unknown = ductile(config_dir, "runworkers", "--group", "gpu", "--once")
    assert unknown.returncode == 2
    assert "--group: unknown worker group 'gpu' (configured groups: media)" in unknown.stderr
    both = ductile(config_dir, "runworkers", "--group", "media", "--plugins", "echo", "--once")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
