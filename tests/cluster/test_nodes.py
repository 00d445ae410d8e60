"""Several worker nodes on one PostgreSQL ledger, each a network namespace of its own (issue 38):
what an operator running a cluster relies on, checked on real processes over a real network."""

from __future__ import annotations

import itertools
import signal
import subprocess
import time

import psycopg
import pytest

from tests.support.cluster import available, cluster
from tests.support.config_dirs import ConfigDir
from tests.support.output import Output
from tests.support.processes import ledger
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.process, pytest.mark.skipif(available() is not None, reason=str(available()))]


def sleepers(count: int, seconds: float) -> list[dict[str, object]]:
    return [
        {"plugin": "stress", "command": "poll", "submitted_by": "cli", "payload": {"mode": "ok", "sleep": seconds}}
        for _ in range(count)
    ]


def claimed_by(job: dict[str, object], proc: subprocess.Popen[str]) -> bool:
    """Whether `proc`'s daemon holds `job`: `ip netns exec` execs the daemon, so its pid is the one
    in its worker id (host:pid:suffix; the nodes share the host's name)."""
    return f":{proc.pid}:" in str(job["claimed_by"] or "")


def test_a_node_killed_mid_drain_loses_nothing_and_reruns_only_what_it_held(config_dir: ConfigDir) -> None:
    """Two nodes drain a backlog; one is SIGKILLed while it runs jobs. Its jobs are recovered
    when their leases end and run again on the other node; every other job ran exactly once."""
    config_dir.service.update(max_workers=3, lease_ttl="5s")
    config_dir.plugins["stress"]["retry"] = {"max_attempts": 3}
    with cluster(("a", "b")) as made:
        config_dir.database_url = made.database_url
        config_dir.write()
        ids = ledger(config_dir, "enqueue", sleepers(40, 0.3))
        a = made.start("a", config_dir, "runworkers")
        b = made.start("b", config_dir, "runworkers")
        outputs = Output(a), Output(b)
        for output in outputs:
            output.wait_for("runworkers started")

        def running_on_b() -> list[str]:
            return [j["id"] for j in ledger(config_dir) if j["status"] == "running" and claimed_by(j, b)]

        held = wait_for(running_on_b, timeout=60, interval=0.1, what="node b to run jobs")
        b.send_signal(signal.SIGKILL)
        b.wait(timeout=30)
        held = set(held) | set(running_on_b())  # what b held when it died

        def drained() -> list[dict[str, object]] | None:
            jobs = ledger(config_dir)
            return jobs if all(j["status"] == "succeeded" for j in jobs) else None

        found = wait_for(drained, timeout=120, interval=0.5, what="node a to drain the backlog and b's jobs")
        jobs = [j for j in found if j["id"] in ids]  # the nodes' own (a plugin's `init`) aside
        assert len(jobs) == len(ids)
        rerun = {j["id"] for j in jobs if j["attempt"] > 1}
        assert rerun and rerun <= held, (rerun, held)
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0, outputs[0].finish()


def test_a_partitioned_node_has_its_jobs_taken_over_its_late_results_refused_and_carries_on(
    config_dir: ConfigDir,
) -> None:
    """Node b is cut off from the database (its cable pulled: no reset reaches its connections,
    which hang) while it runs jobs. Past their leases node a takes them over and runs them. When
    the link returns, b's late results are refused (the job is a's now) and b, never restarted,
    claims new work again."""
    config_dir.service.update(max_workers=2, lease_ttl="5s")
    config_dir.plugins["stress"]["retry"] = {"max_attempts": 3}
    with cluster(("a", "b")) as made:
        config_dir.database_url = made.database_url
        config_dir.write()
        b = made.start("b", config_dir, "runworkers")
        b_output = Output(b)
        b_output.wait_for("runworkers started")
        held = ledger(config_dir, "enqueue", sleepers(2, 3.0))
        wait_for(
            lambda: all(j["status"] == "running" and claimed_by(j, b) for j in ledger(config_dir) if j["id"] in held),
            timeout=60,
            interval=0.1,
            what="node b to run both jobs",
        )
        made.cut("b")
        a = made.start("a", config_dir, "runworkers")
        a_output = Output(a)

        def done_by_a() -> bool:
            jobs = {j["id"]: j for j in ledger(config_dir)}
            return all(jobs[i]["status"] == "succeeded" and not claimed_by(jobs[i], b) for i in held)

        wait_for(done_by_a, timeout=90, interval=0.5, what="node a to take over and finish b's jobs")
        made.mend("b")
        # b's plugins finished long ago; its outcomes, sent into the hung connection or after it,
        # find the jobs recovered by a: dropped, not written over a's.
        b_output.wait_for("result discarded", timeout=120)
        assert all(j["status"] == "succeeded" for j in ledger(config_dir) if j["id"] in held)
        # b carries on: with a gone, only b can run what comes next.
        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0, a_output.finish()
        (later,) = ledger(config_dir, "enqueue", sleepers(1, 0.1))
        wait_for(
            lambda: next(j for j in ledger(config_dir) if j["id"] == later)["status"] == "succeeded",
            timeout=120,
            interval=0.5,
            what="node b to run a job after the partition",
        )
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=60) == 0, b_output.finish()


def test_three_schedulers_fire_each_due_run_once_and_the_others_go_on_when_one_is_killed(
    config_dir: ConfigDir,
) -> None:
    """Three `runscheduler`s, each on a node of its own, share one schedule (`every: 1s`): a run
    fires once (each one's take of a due entry is a compare-and-set; two fires of one run would
    be jobs a moment apart), and when schedulers are SIGKILLed the one left keeps firing."""
    config_dir.service.update(tick_interval="1s")
    config_dir.plugins["echo"]["schedules"] = [{"id": "beat", "every": "1s", "command": "poll"}]
    with cluster(("a", "b", "c", "w")) as made:
        config_dir.database_url = made.database_url
        config_dir.write()
        worker = made.start("w", config_dir, "runworkers")
        Output(worker).wait_for("runworkers started")
        schedulers = {node: made.start(node, config_dir, "runscheduler") for node in ("a", "b", "c")}
        outputs = {node: Output(proc) for node, proc in schedulers.items()}
        for output in outputs.values():
            output.wait_for("runscheduler started")

        def fired() -> list[float]:
            with psycopg.connect(made.database_url, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT EXTRACT(EPOCH FROM created_at) FROM job_queue WHERE submitted_by = 'scheduler'"
                    " ORDER BY created_at"
                ).fetchall()
            return [float(r[0]) for r in rows]

        wait_for(lambda: len(fired()) >= 6, timeout=60, interval=0.5, what="six scheduled runs")
        for node in ("a", "b"):
            schedulers[node].send_signal(signal.SIGKILL)
            schedulers[node].wait(timeout=30)
        killed_at = time.time()
        wait_for(
            lambda: len([t for t in fired() if t > killed_at + 0.5]) >= 3,
            timeout=30,
            interval=0.5,
            what="the scheduler left to keep firing",
        )
        times = fired()
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        # `every: 1s` counts from the last run's success: runs are at least about a second apart.
        assert min(gaps) > 0.5, gaps
        schedulers["c"].send_signal(signal.SIGTERM)
        worker.send_signal(signal.SIGTERM)
        assert schedulers["c"].wait(timeout=60) == 0, outputs["c"].finish()
        assert worker.wait(timeout=60) == 0
