"""Issue 39: what each sandbox profile costs a plugin's spawn, against no sandbox in the same run.

    .venv/bin/python tests/bench/bench_sandbox.py [--jobs 2000] [--rounds 3] [--profiles ...] [--out FILE]

The gateway's own spawn (gateway.execution.runner.run_plugin, as dispatch calls it) of the
minimal `/bin/sh` plugin of benchmark 1, `--jobs` times per profile and round from two threads
(a daemon's two worker slots), with the Confinement the registry builds for each profile
(gateway.plugins.sandboxing.confine) and the namespace dispatch spawns it into. The profiles run
interleaved, round after round, so a machine that slows down mid-run slows them all; a profile's
ratio is the median over the rounds of its jobs/s divided by no sandbox's in the same round.

* none: Confinement(): no limits, the host's network and filesystem (the code before issue 39).
* limits: the default profile: the five rlimits set with prlimit(pid) after the spawn.
* network_none: limits + the spawn inside the empty network namespace (setns around posix_spawn).
* egress: limits + the spawn inside the egress proxy's namespace, with a job's proxy credentials
  (no request is made: the admission and release per job are what is timed).
* user: limits + setpriv to `nobody` (util-linux prlimit at the head of the wrapper).
* strict: network none + filesystem strict (bubblewrap, prlimit inside).

Targets (issue 39): limits >= 0.97 x, network none >= 0.95 x, dedicated uid >= 0.85 x, strict
>= 0.3 x. Needs root (namespaces, setpriv); a profile this host cannot enforce is reported as
skipped with the reason.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import NOP_SCRIPT, REPO, emit, machine, speed_probe, temp_dir, write_plugin

sys.path.insert(0, str(REPO))

from bench_throughput import plugin_env, sample_request

from gateway.config.sandbox import EGRESS, NONE, STRICT, Sandbox
from gateway.execution.credentials import as_user
from gateway.execution.egress import PROXY
from gateway.execution.namespaces import empty_namespace
from gateway.execution.runner import _limit, run_plugin
from gateway.plugins.sandboxing import Confinement, Unconfinable, confine

THREADS = 2
PROFILES: dict[str, Sandbox | None] = {
    "none": None,
    "limits": Sandbox(),
    "network_none": Sandbox(network=NONE),
    "egress": Sandbox(network=EGRESS, egress=("api.example.com",)),
    "user": Sandbox(user="nobody"),
    "strict": Sandbox(network=NONE, filesystem=STRICT),
}
TARGETS = {"limits": 0.97, "network_none": 0.95, "user": 0.85, "strict": 0.3}
EXPECTED = b'{"status":"ok","result":"x"}'

Spawn = Callable[[], bytes]


def spawner(entry: Path, sandbox: Sandbox | None) -> Spawn:
    """One job's spawn under `sandbox`, as dispatch makes it."""
    confinement = Confinement() if sandbox is None else confine(sandbox, entry.parent)
    request, env = sample_request(), plugin_env()

    def spawn() -> bytes:
        network, job_env, ticket = None, env, None
        if confinement.network == NONE:
            network = empty_namespace()
        elif confinement.network == EGRESS:
            ticket = PROXY.admit(str(uuid.uuid4()), confinement.egress)
            network, job_env = ticket.namespace, {**env, **ticket.env}
        try:
            result = run_plugin(entry, request, timeout=30, env=job_env, confinement=confinement, network=network)
        finally:
            if ticket is not None:
                PROXY.release(ticket)
        if result.stdout != EXPECTED:
            raise RuntimeError(f"unexpected answer {result.stdout!r}, stderr {result.stderr!r}")
        return result.stdout

    return spawn


def added_calls(entry: Path) -> dict[str, float]:
    """Microseconds of the calls each profile adds to one spawn, timed alone (1,000 times each
    against a live child): on a busy machine the drains' noise hides differences this small."""
    limits = confine(Sandbox(), entry.parent).rlimits
    child = subprocess.Popen(["sleep", "30"])
    try:
        timings = {
            "limits_prlimit_x5": lambda: _limit(child.pid, limits),
            "network_setns_pair": lambda: _enter(empty_namespace()),
            "user_credentials": lambda: _enter_user(),
        }
        found = {}
        for name, call in timings.items():
            call()
            started = time.perf_counter()
            for _ in range(1000):
                call()
            found[name] = round((time.perf_counter() - started) * 1000, 2)  # 1,000 calls: ms = us each
        return found
    finally:
        child.kill()
        child.wait()


def _enter(namespace: Any) -> None:
    with namespace.entered():
        pass


def _enter_user() -> None:
    with as_user(65534, 65534):
        pass


def drain(spawn: Spawn, jobs: int) -> float:
    """jobs/s of `jobs` spawns from THREADS threads."""
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        started = time.perf_counter()
        list(pool.map(lambda _: spawn(), range(jobs)))
        return jobs / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--out")
    args = parser.parse_args()
    names = ["none", *(n for n in args.profiles.split(",") if n != "none")]
    with temp_dir("sandbox") as base:
        base.chmod(0o755)  # the `user` profile's plugin runs as nobody
        entry = write_plugin(base / "plugins", "nop", NOP_SCRIPT)
        for path in (base / "plugins", entry.parent):
            path.chmod(0o755)
        spawns: dict[str, Spawn] = {}
        skipped: dict[str, str] = {}
        for name in names:
            try:
                spawns[name] = spawner(entry, PROFILES[name])
                spawns[name]()  # warm: the namespaces and the proxy are made once per process
            except Unconfinable as exc:
                skipped[name] = str(exc)
        calls = added_calls(entry) if os.geteuid() == 0 else {}
        speed = speed_probe(2.0)
        rounds: dict[str, list[float]] = {name: [] for name in spawns}
        for _ in range(args.rounds):
            for name, spawn in spawns.items():
                rounds[name].append(round(drain(spawn, args.jobs), 1))
    base_rate = statistics.median(rounds["none"])
    profiles: dict[str, Any] = {}
    for name, rates in rounds.items():
        median = statistics.median(rates)
        # Paired by round: a profile against the no-sandbox drain of the same round, a minute
        # apart at most, so a machine whose speed drifts between rounds moves both.
        ratio = round(statistics.median(r / n for r, n in zip(rates, rounds["none"], strict=True)), 3)
        entry_out: dict[str, Any] = {
            "jobs_per_s_rounds": rates,
            "jobs_per_s_median": round(median, 1),
            "ratio_to_none": ratio,
            "added_ms_per_spawn": round(THREADS * 1000 * (1 / median - 1 / base_rate), 3),
        }
        if name in TARGETS:
            entry_out["target"] = f">= {TARGETS[name]}"
            entry_out["met"] = ratio >= TARGETS[name]
        profiles[name] = entry_out
    emit(
        {
            "benchmark": "sandbox",
            "jobs_per_round": args.jobs,
            "rounds": args.rounds,
            "threads": THREADS,
            "euid": os.geteuid(),
            "machine": machine(),
            "speed_before": speed,
            "profiles": profiles,
            "added_calls_us": calls,
            "skipped": skipped,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
