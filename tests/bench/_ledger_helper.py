"""Producer side of the benchmarks: Django set up on a config's ledger, as any enqueuing process is.

    python tests/bench/_ledger_helper.py CONFIG_DIR enqueue N PLUGIN
    python tests/bench/_ledger_helper.py CONFIG_DIR trickle N INTERVAL_MS PLUGIN
    python tests/bench/_ledger_helper.py CONFIG_DIR pipeline N GAP_MS PIPELINE

Prints one JSON line. `trickle` records, per job, the wall-clock time (time.time_ns) of the
enqueuing transaction's commit: the first on_commit callback of the outermost transaction runs
right after COMMIT returns and before the gateway's own callback that pokes the idle workers.
`pipeline` runs N synchronous pipeline runs one after another, GAP_MS apart (measured from the
previous run's return), each through `gateway.intake.events.run_synchronously` (entry jobs resolved,
TreeWaiter entered, root enqueued, waited on until the tree is terminal: what the synchronous
API calls) and records time.time_ns() just before the call and just after it returns; a subclass
of TreeWaiter (installed as gateway.intake.events.TreeWaiter) adds readings after the waiter's __enter__
and when its wait() returns, before its __exit__.
"""

from __future__ import annotations

import json
import sys
import time

from gateway.bootstrap import prepare_process

prepare_process(sys.argv[1])

import django  # noqa: E402

django.setup()

from django.db import transaction  # noqa: E402

from gateway.storage.database import ensure_schema  # noqa: E402
from ledger.models import Job, JobSpec  # noqa: E402
from ledger.submitters import Submitter  # noqa: E402
from ledger.writes.transaction import writing  # noqa: E402


def enqueue(count: int, plugin: str) -> dict[str, object]:
    started = time.perf_counter()
    for _ in range(count):
        Job.objects.enqueue(JobSpec(plugin=plugin, command="poll", submitter=Submitter.CLI), default_dedupe_ttl=86400)
    return {"enqueued": count, "seconds": time.perf_counter() - started}


def trickle(count: int, interval_ms: float, plugin: str) -> dict[str, object]:
    rows = []
    next_at = time.monotonic()
    for _ in range(count):
        stamp: list[int] = []
        with writing():
            # Registered before enqueue's own on_commit (the wake-up poke), so it runs first.
            transaction.on_commit(lambda stamp=stamp: stamp.append(time.time_ns()))
            result = Job.objects.enqueue(
                JobSpec(plugin=plugin, command="poll", submitter=Submitter.CLI), default_dedupe_ttl=86400
            )
        rows.append([result.job_id, stamp[0]])
        next_at += interval_ms / 1000
        time.sleep(max(0.0, next_at - time.monotonic()))
    return {"jobs": rows}


def pipeline(count: int, gap_ms: float, name: str) -> dict[str, object]:
    import gateway.intake.events
    from gateway.intake.events import run_synchronously
    from gateway.intake.trees import TreeWaiter
    from gateway.runtime import RUNTIME

    stamps: dict[str, int] = {}

    class StampedWaiter(TreeWaiter):
        """The product's waiter, plus two clock readings: after __enter__ (socket bound, listener
        thread started) and when wait() returns (the tree read as terminal), before __exit__."""

        def __enter__(self) -> StampedWaiter:
            super().__enter__()
            stamps["entered_ns"] = time.time_ns()
            return self

        def wait(self, root_ids, timeout, **options):  # type: ignore[no-untyped-def]
            outcome = super().wait(root_ids, timeout, **options)
            stamps["waited_ns"] = time.time_ns()
            return outcome

    gateway.intake.events.TreeWaiter = StampedWaiter  # run_synchronously looks the name up per call
    runtime = RUNTIME.get()
    rows = []
    for n in range(count):
        time.sleep(gap_ms / 1000)
        stamps.clear()
        before = time.time_ns()
        outcome = run_synchronously(runtime, name, {"n": n}, submitter=Submitter.CLI, timeout=60)
        after = time.time_ns()
        rows.append(
            {"root": outcome.root_ids[0], "before_ns": before, "after_ns": after, "status": outcome.status, **stamps}
        )
    return {"trees": rows}


if __name__ == "__main__":
    ensure_schema()
    action = sys.argv[2]
    if action == "enqueue":
        out = enqueue(int(sys.argv[3]), sys.argv[4])
    elif action == "trickle":
        out = trickle(int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    elif action == "pipeline":
        out = pipeline(int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps(out))
