"""Issue 36: what one `ductile` call costs, as a whole process, against importing Django's ORM.

    .venv/bin/python tests/bench/bench_cli.py [--rounds 15] [--quick] [--out FILE]

Agents drive the console script hundreds of times an hour, so each call's start-up is the cost.
A config with one plugin and a ledger with finished jobs is built under $TMPDIR; then the
console script (`.venv/bin/ductile`, the file `pip install` wrote) runs each command below once
per round, in turn, after one warm-up round, and each run's user+system CPU and wall time are
read from the operating system (`os.wait4`). Each command is compared with the baseline *of the
same round*, `python -c "from django.db import models"`: the ORM's own import, the least a
command that reads the ledger must load. Ratios within a round hold when a shared machine's
speed drifts between rounds; the median ratio over the rounds is reported, with the CPU ratio
as the target's measure (wall time adds the machine's other tenants' waits, also reported).

Targets (issue 36): the read commands (`job logs`, `job inspect`, `plugin list`, `system
status`) <= 1.5 x the baseline; `--version` and `--help`, which load no ORM at all, <= 0.5 x.
`--quick` (the CI smoke, via run_all.py): 5 rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from _common import NOP_SCRIPT, PYTHON, REPO, BenchConfig, emit, helper, machine, temp_dir

SCRIPT = str(Path(PYTHON).parent / "ductile")
BASELINE = "orm_import"
READS = ("job logs", "job inspect", "plugin list", "system status")
NO_ORM = ("--version", "--help")
TARGETS = {**dict.fromkeys(READS, 1.5), **dict.fromkeys(NO_ORM, 0.5)}
JOBS = 20


def commands(config: BenchConfig, job_id: str) -> dict[str, list[str]]:
    at = ["--config-dir", str(config.path)]
    return {
        BASELINE: [PYTHON, "-c", "from django.db import models"],
        "interpreter": [PYTHON, "-c", "pass"],  # for reference: the bare start, site-packages included
        "--version": [SCRIPT, "--version"],
        "--help": [SCRIPT, "--help"],
        "job logs": [SCRIPT, "job", "logs", *at],
        "job inspect": [SCRIPT, "job", "inspect", job_id, *at],
        "plugin list": [SCRIPT, "plugin", "list", *at],
        "system status": [SCRIPT, "system", "status", *at],
    }


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One run's CPU (user + system, its children's included) and wall seconds; it must exit 0."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{stderr[-3000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def prepared(base: Path) -> tuple[BenchConfig, str]:
    """A config whose ledger holds JOBS finished jobs (what `job logs` lists), and one job's id."""
    config = BenchConfig(base, {"nop": NOP_SCRIPT})
    helper(config, "enqueue", str(JOBS), "nop")
    env = config.env()
    subprocess.run(
        [SCRIPT, "runworkers", "--max-jobs", str(JOBS), "--config-dir", str(config.path)],
        check=True,
        env=env,
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )
    listed = subprocess.run(
        [SCRIPT, "job", "logs", "--json", "--config-dir", str(config.path)],
        check=True,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    logs = json.loads(listed.stdout)["logs"]
    if len(logs) != JOBS:
        raise RuntimeError(f"expected {JOBS} finished jobs in job logs, found {len(logs)}")
    return config, logs[0]["job_id"]


def summary(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 4), "median": round(statistics.median(values), 4), "max": round(max(values), 4)}


def run(rounds: int) -> dict[str, Any]:
    with temp_dir("cli") as base:
        config, job_id = prepared(base)
        env = config.env()
        plan = commands(config, job_id)
        cpu: dict[str, list[float]] = {name: [] for name in plan}
        wall: dict[str, list[float]] = {name: [] for name in plan}
        for number in range(rounds + 1):  # the first round warms the page cache and the memo
            for name, argv in plan.items():
                c, w = timed(argv, env)
                if number:
                    cpu[name].append(c)
                    wall[name].append(w)
    result: dict[str, Any] = {"rounds": rounds, "baseline": " ".join(plan[BASELINE][1:]), "commands": {}}
    for name in plan:
        row: dict[str, Any] = {"cpu_s": summary(cpu[name]), "wall_s": summary(wall[name])}
        if name != BASELINE:
            row["cpu_ratio"] = summary([a / b for a, b in zip(cpu[name], cpu[BASELINE], strict=True)])
            row["wall_ratio"] = summary([a / b for a, b in zip(wall[name], wall[BASELINE], strict=True)])
        if name in TARGETS:
            row["target_ratio"] = TARGETS[name]
            row["met"] = row["cpu_ratio"]["median"] <= TARGETS[name]
        result["commands"][name] = row
    result["all_met"] = all(row.get("met", True) for row in result["commands"].values())
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="5 rounds (the CI smoke)")
    parser.add_argument("--out")
    args = parser.parse_args()
    result = {"benchmark": "cli", "machine": machine(), **run(5 if args.quick else args.rounds)}
    emit(result, args.out)


if __name__ == "__main__":
    main()
