"""Diagnostic wrapper for `bench_profile.py` (not an entry point of its own).

    BENCH_PROFILE_FILE=OUT python tests/bench/_profile_daemon.py manage.py runworkers --config-dir DIR ...

Runs the real `runworkers` in this process with the clocks of _sections.py around the calls a
worker makes per job, and writes their totals to $BENCH_PROFILE_FILE (JSON) at exit, with the
process's own CPU (`os.times`) from after Django's set-up, so that what no section covers shows.
The product code is not changed; nothing here is imported by it.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

import _sections
from _sections import patch

from gateway.bootstrap import config_dir_from_argv, prepare_process

argv = sys.argv[1:]  # manage.py runworkers ...
prepare_process(config_dir_from_argv(argv[1:]))

import django  # noqa: E402

django.setup()

from django.core.management import execute_from_command_line  # noqa: E402

from gateway.cli.main import strip_config_dir  # noqa: E402
from gateway.execution import dispatch, runner, workers  # noqa: E402
from gateway.plugins.seal import PluginSeal  # noqa: E402
from ledger.models import Job, JobLog, JobTransition, PluginState  # noqa: E402
from ledger.models.jobs import JobQuerySet  # noqa: E402

_sections.install_ledger()
SECTIONS = [  # (owner, attribute, section): every call a worker makes per job
    (workers.WorkerDaemon, "work", "worker loop (claim look, counters, wake-ups)"),
    (workers.WorkerDaemon, "_main_loop", "main thread: loop, joins"),
    (workers.WorkerDaemon, "_beat", "main thread: heartbeat"),
    (workers.WorkerDaemon, "_recover", "main thread: recovery pass"),
    (workers.WorkerDaemon, "wake", "wake-ups: in-process notify"),
    (JobQuerySet, "claim_next", "claim: claim_next (ORM/SQL, excl. gate, BEGIN, COMMIT)"),
    (JobTransition, "record", "ledger: transition INSERT"),
    (Job, "record_outcome", "completion: record_outcome (excl. the parts below)"),
    (Job, "move", "completion: move (status UPDATE)"),
    (JobLog, "record", "completion: job_log INSERT"),
    (PluginState, "current", "preflight: PluginState.current"),
    (PluginSeal, "check", "preflight: plugin seal check"),
    (dispatch, "build_request", "preflight: build_request (JSON)"),
    (dispatch, "judge", "judge the response (JSON)"),
    (dispatch.Executor, "_execute", "executor: rest (position, refusal, context, outcome)"),
    (dispatch.Executor, "_record", "executor: _record (hooks, result log line)"),
    (dispatch, "run_plugin", "plugin: run_plugin rest (env dict, lifeline, pidfd)"),
    (runner.os, "posix_spawn", "plugin: spawn (posix_spawn: vfork/exec)"),
    (runner._Exchange, "run", "plugin: exchange (pipes, pidfd, wait, reap)"),
    (runner, "sweep_adopted", "plugin: sweep_adopted (/proc children)"),
]
for owner, attr, name in SECTIONS:
    patch(owner, attr, name)


@atexit.register
def _dump() -> None:
    with open(os.environ["BENCH_PROFILE_FILE"], "w") as out:
        json.dump(_sections.report(), out, indent=1)


execute_from_command_line(strip_config_dir(argv))
