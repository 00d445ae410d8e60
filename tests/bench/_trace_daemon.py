"""Diagnostic wrapper for `bench_pipeline.py --trace` (not an entry point of its own).

    python tests/bench/_trace_daemon.py manage.py runworkers --config-dir DIR ...

Runs the real `runworkers` in this process with two wrappers installed after Django is set up,
and appends one JSON line per completed job to $BENCH_TRACE_FILE:

- `job`, `enter_ns`: time.time_ns() when Executor._record is called (it opens the completion's
  write transaction; Job.record_outcome's `now` inside it becomes the job's completed_at and its
  children's created_at), then the worker's next job is claimed in the same transaction;
- `commit_ns`: when the first wake-up callback of that transaction starts (ledger.job_notifications'
  `_call_listeners`, looked up by name when it runs): COMMIT has returned and the write gate is
  released;
- `return_ns`: when _record returns: every wake-up after the commit has run (the in-process
  worker wake-up, the poke to tree-waiter sockets; other processes' workers were poked before the
  commit) and the job's log lines are written.

The wrappers cost a few microseconds per job (two clock readings and one short file write). The
product code is not changed; nothing here is imported by it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from gateway.bootstrap import config_dir_from_argv, prepare_process

argv = sys.argv[1:]  # manage.py runworkers ...
prepare_process(config_dir_from_argv(argv[1:]))

import django  # noqa: E402

django.setup()

from django.core.management import execute_from_command_line  # noqa: E402

from gateway.cli.main import strip_config_dir  # noqa: E402
from gateway.execution.dispatch import Executor  # noqa: E402
from ledger import job_notifications  # noqa: E402

_out = open(os.environ["BENCH_TRACE_FILE"], "a", buffering=1)  # noqa: SIM115 - lives as long as the process
_out_lock = threading.Lock()
_local = threading.local()
_record = Executor._record
_call_listeners = job_notifications._call_listeners


def record(self, job, outcome, runtime):  # type: ignore[no-untyped-def]
    row = {"job": job.id, "enter_ns": time.time_ns()}
    _local.row = row
    try:
        return _record(self, job, outcome, runtime)
    finally:
        row["return_ns"] = time.time_ns()
        _local.row = None
        with _out_lock:
            _out.write(json.dumps(row) + "\n")


def call_listeners(channel):  # type: ignore[no-untyped-def]
    row = getattr(_local, "row", None)
    if row is not None and "commit_ns" not in row:
        row["commit_ns"] = time.time_ns()
    return _call_listeners(channel)


Executor._record = record  # type: ignore[method-assign]
job_notifications._call_listeners = call_listeners

execute_from_command_line(strip_config_dir(argv))
