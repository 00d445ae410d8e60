"""Every figure of docs/performance.md in one command, with each target's PASS/FAIL beside it.

    .venv/bin/python tests/bench/run_all.py [--out-dir DIR]     # everything, about 25 min on 2 cores
    .venv/bin/python tests/bench/run_all.py --quick [--out-dir DIR]   # the CI smoke, under 3 min

Runs the benchmarks one after another (never two at once: they share the CPUs) and writes each
one's JSON to DIR (default: a new temporary directory), then DIR/summary.json and the same summary
on stdout. Both say what was measured where:

- `provenance`: the commit (`git rev-parse --short HEAD`), whether the work tree was dirty (and
  which files), the date at start and end, the duration;
- `machine`: cores, CPU model, RAM, kernel, Python, SQLite, and the 1-minute load average at the
  start and at the end of the whole run and around each benchmark (the machine may be shared);
- `speed`: before each benchmark and at the end, how fast the machine ran a fixed Python loop
  over PROBE_SECONDS (`_common.speed_probe`): on a shared VM the speed moves by tens of percent
  within minutes, which the load average does not show, and every figure moves with it.

Every throughput and API figure is given with the raw-spawn ceiling and django-q2 of the *same*
run (bench_throughput.py, run first), because only ratios within one run compare across machines.

Full run: bench_throughput (3 interleaved repetitions with django-q2), bench_latency, bench_idle,
bench_live_idle (the `system start` tree idle, then with the live views), bench_queue_ops,
bench_pipeline (3 runs), bench_scheduler (1 run, SQLite), bench_api (queued, workers and drain;
1 run), bench_console, bench_hostile (issue 33), bench_profile (the daemon's CPU per job by section; a diagnostic),
and bench_cli (issue 36: a CLI call's CPU over the ORM's import, 15 rounds; 5 in --quick).

--quick is the CI smoke: one throughput repetition of 1,000 jobs with django-q2, bench_latency, the
`system start` tree idle for 10 s (runworkers alone is one of its processes), 30 pipeline trees, the
API alone at 500 requests/s and while the workers drain at 300 requests/s, 10 s each, without the
saturation phase, bench_profile on 300 jobs, and bench_cli's 5 rounds. It reports every target like
the full run, and besides them it checks *floors* (FLOORS below): about 40 % below what the code
achieves today (issue 16's regression was 40 %: 0.50 -> 0.30 of the ceiling), or for latencies an
order of magnitude above today's tail at load 5 (the regression put the API's p99 at 11.8 s), so
that only a gross regression crosses them, never the noise of a shared 2-core machine. Ratios are
taken against the ceiling and django-q2 measured in the same run, so a busy machine slows both sides
alike. Raise the floors to 0.6 x the new figures as the hot path improves. It exits 1 when a floor
is crossed, and 0 otherwise, targets met or not: targets are reported, floors gate.
Exit 2: a benchmark itself failed (its stderr is printed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import REPO, machine, speed_probe

BENCH = Path(__file__).resolve().parent
# Seconds of `speed_probe` before each benchmark: ~100 loops, enough for a minimum and a median.
PROBE_SECONDS = 2.0

FULL: dict[str, list[str]] = {
    "throughput": ["bench_throughput.py", "--repeat", "3"],
    "latency": ["bench_latency.py"],
    "idle": ["bench_idle.py"],
    "system_idle": ["bench_live_idle.py"],
    "queue_ops": ["bench_queue_ops.py"],
    "pipeline": ["bench_pipeline.py", "--runs", "3"],
    "scheduler": ["bench_scheduler.py", "--runs", "1"],
    "api": ["bench_api.py", "--runs", "1", "--variants", "queued,workers,drain"],
    "console": ["bench_console.py"],
    "hostile": ["bench_hostile.py"],
    "profile": ["bench_profile.py", "--jobs", "3000"],
    "cli": ["bench_cli.py"],
}
QUICK: dict[str, list[str]] = {
    "throughput": ["bench_throughput.py", "--repeat", "1", "--jobs", "1000"],
    "latency": ["bench_latency.py", "--jobs", "100"],
    "system_idle": ["bench_live_idle.py", "--windows", "idle", "--window", "10", "--settle", "3"],
    "pipeline": ["bench_pipeline.py", "--runs", "1", "--trees", "30", "--cli-runs", "0"],
    "api": [
        "bench_api.py",
        *("--runs", "1", "--variants", "queued,drain", "--duration", "10", "--warmup", "2", "--skip-saturation"),
    ],
    # A diagnostic, run so that it cannot rot unseen: it patches the daemon's per-job calls by name.
    "profile": ["bench_profile.py", "--jobs", "300"],
    "cli": ["bench_cli.py", "--quick"],
}


# --quick's gross-regression floors (module docstring). Measured on 2026-11-24 at e88b14f, load 4-5:
# ours/ceiling 0.26-0.40 (steady 0.34-0.46), ours/django-q2 1.6-2.9, latency p99 10-112 ms, idle
# tree 0.6-0.7 % and 786 MB RSS, tree overhead p50 9-14 ms, API p99 13-572 ms.
FLOORS = {
    # On the steady rate: --quick's 1,000 jobs make the daemon's start-up (1-1.6 s at load 5) a
    # large, load-dependent share of the rate that includes it.
    # Raised with issue 16's fixes (steady 0.52 at load 1, 0.35 at load 5): a fall like the issue's
    # 40 % crosses it on a quiet machine; a busy one alone does not.
    "ours_steady_over_ceiling": 0.3,
    # Not 0.6 x today's: django-q2's processes gain more from a quiet machine than one GIL-bound
    # daemon does, so this ratio swung 1.6-2.9 between runs; slower than django-q2 is the gross case.
    "ours_over_djq": 1.0,
    "latency_p99_ms": 500.0,
    "idle_tree_cpu_percent": 10.0,
    "idle_runworkers_cpu_percent": 5.0,
    "idle_tree_rss_mb": 1500.0,
    "pipeline_tree_p50_ms": 20.0,  # ~4 x the 5.5 ms of issue 16's fixes; the pipelines issue had 30
    "api_p99_ms": 500.0,  # alone 9 ms, draining 12 ms at load 1; 229 ms was the profile's worst at load 5
    # A CLI call's CPU over the ORM's import in the same round (issue 36, 2026-11-28 at load 3-6):
    # reads 1.42-1.53 (2.0 before), --help 0.16 and --version 0.40 (2.5 and 2.0 before). A read
    # that loads the admin's apps again is ~1.9, the help or version that loads Django ~1.2.
    "cli_read_over_orm": 1.8,
    "cli_no_orm_over_orm": 0.8,
}


@dataclass
class Figure:
    """One reported number, its target, and (for --quick) its gross-regression floor."""

    name: str
    value: float | None
    unit: str
    target: str
    met: bool | None
    floor: str | None = None
    above_floor: bool | None = None
    note: str = ""

    def line(self) -> str:
        value = "n/a" if self.value is None else f"{self.value:g}"
        verdict = {True: "PASS", False: "FAIL", None: "----"}[self.met]
        text = f"[{verdict}] {self.name}: {value} {self.unit} (target {self.target})"
        if self.floor is not None:
            text += f"; floor {self.floor}: {'ok' if self.above_floor else 'GROSS REGRESSION'}"
        return text + (f"; {self.note}" if self.note else "")


Floor = tuple[str, Callable[[float | None], bool | None]]


def floor(sense: str, key: str) -> Floor:
    """One of FLOORS as (its text, its check)."""
    limit = FLOORS[key]
    check = at_least if sense == ">=" else at_most
    return f"{sense} {limit:g}", lambda value: check(value, limit)


def at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def at_least(value: float | None, limit: float) -> bool | None:
    return None if value is None else value >= limit


def provenance() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO).stdout.strip()

    dirty = [line[3:] for line in git("status", "--porcelain").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(dirty), "dirty_paths": dirty[:20]}


def run_plan(plan: dict[str, list[str]], out: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, cmd in plan.items():
        speed = speed_probe(PROBE_SECONDS)
        load = os.getloadavg()[0]
        started = time.monotonic()
        print(
            f"== {name}: {' '.join(cmd)} (load {load:.2f}; probe loop {speed['loop_ms_min']} ms at best,"
            f" {speed['loop_ms_median']} ms median)",
            flush=True,
        )
        proc = subprocess.run(
            [sys.executable, str(BENCH / cmd[0]), *cmd[1:], "--out", str(out / f"{name}.json")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-6000:])
            print(f"error: {cmd[0]} exited {proc.returncode}; results so far in {out}", file=sys.stderr)
            sys.exit(2)
        results[name] = json.loads((out / f"{name}.json").read_text())
        results[name]["_run"] = {
            "seconds": round(time.monotonic() - started, 1),
            "loadavg_1m_before": round(load, 2),
            "speed_before": speed,
            "loadavg_1m_after": round(os.getloadavg()[0], 2),
        }
    return results


def figures(results: dict[str, Any], quick: bool) -> list[Figure]:
    """Every figure with its target; --quick adds the floors (module docstring)."""
    out: list[Figure] = []

    def add(figure: Figure, limit: Floor | None = None) -> None:
        if quick and limit is not None:
            figure.floor, check = limit
            figure.above_floor = check(figure.value) is not False  # a missing figure fails its own benchmark
        out.append(figure)

    t = results["throughput"]["summary"]
    same_run = f"same run: ceiling {t['ceiling_jobs_per_s']}/s, django-q2 {t.get('djq_jobs_per_s')}/s"
    ratio = t["ours_over_ceiling"]
    add(
        Figure(
            "throughput with start-up, runworkers / raw-spawn ceiling",
            ratio,
            "",
            "- (diagnostic: the headline is the steady state, start-up its own figure; issue 37)",
            None,
            note=f"ours {t['ours_jobs_per_s']}/s, start-up included; each repetition's own ratio"
            f" {', '.join(map(str, t['ours_over_ceiling_each_run']))}; {same_run}",
        )
    )
    steady = t["ours_steady_over_ceiling"]
    add(
        Figure(
            "throughput, steady state (start-up excluded) / ceiling",
            steady,
            "",
            ">= 0.8",
            at_least(steady, 0.8),
            note=f"ours steady {t['ours_steady_jobs_per_s']}/s",
        ),
        floor(">=", "ours_steady_over_ceiling"),
    )
    startup = t["ours_startup_seconds"]
    add(
        Figure(
            "daemon start-up, exec to its first claim",
            startup,
            "s",
            "<= 0.15",
            at_most(startup, 0.15),
            note="the first job's started_at minus the exec of runworkers, median of the throughput runs",
        )
    )
    djq = t.get("ours_over_djq")
    add(
        Figure("throughput, runworkers / django-q2", djq, "x", ">= 3", at_least(djq, 3.0), note=same_run),
        floor(">=", "ours_over_djq"),
    )
    add(
        Figure(
            "daemon CPU per job (start-up included)",
            t["ours_daemon_cpu_ms_per_job"],
            "ms",
            "- (diagnostic)",
            None,
            note=f"start-up {t['ours_startup_seconds']} s",
        )
    )

    if "profile" in results:
        sections = results["profile"]["sections"]
        unattributed = next(row for row in sections if row["section"].startswith("unattributed"))
        named = [row for row in sections if row is not unattributed]
        add(
            Figure(
                "daemon CPU per job under bench_profile's clocks",
                results["profile"]["process_cpu_ms_per_job"],
                "ms",
                "- (diagnostic)",
                None,
                note=f"{1 - unattributed['share_of_process_cpu']:.0%} in named sections; the largest: "
                + ", ".join(f"{row['section']} {row['cpu_us_per_job']} µs" for row in named[:3]),
            )
        )

    lat = results["latency"]["commit_to_plugin_start_ms"]
    add(Figure("latency, enqueue commit -> plugin start, p50", lat["p50"], "ms", "<= 10", at_most(lat["p50"], 10)))
    add(
        Figure("latency, enqueue commit -> plugin start, p99", lat["p99"], "ms", "<= 50", at_most(lat["p99"], 50)),
        floor("<=", "latency_p99_ms"),
    )

    if "idle" in results:
        idle = results["idle"]
        add(
            Figure(
                "idle runworkers alone (bench_idle), CPU",
                idle["cpu_percent_of_one_core"],
                "% of a core",
                "<= 1",
                at_most(idle["cpu_percent_of_one_core"], 1),
            )
        )
        add(
            Figure(
                "idle runworkers alone (bench_idle), RSS", idle["rss_mb"], "MB", "<= 100", at_most(idle["rss_mb"], 100)
            )
        )
    tree = results["system_idle"]["idle"]
    workers_cpu = tree["cpu_percent_by_process"].get("runworkers")
    per_process = ", ".join(f"{k} {v}%" for k, v in tree["cpu_percent_by_process"].items())
    add(
        Figure(
            "idle `system start` tree, CPU (sum)",
            tree["cpu_percent_of_one_core"],
            "% of a core",
            "<= 2",
            at_most(tree["cpu_percent_of_one_core"], 2),
            note=f"{tree['processes']} processes: {per_process}",
        ),
        floor("<=", "idle_tree_cpu_percent"),
    )
    add(
        Figure(
            "idle `system start` tree, runworkers' CPU", workers_cpu, "% of a core", "<= 1", at_most(workers_cpu, 1)
        ),
        floor("<=", "idle_runworkers_cpu_percent"),
    )
    rss_by = ", ".join(f"{k} {v}" for k, v in tree["rss_mb_by_process"].items())
    add(
        Figure(
            "idle `system start` tree, RSS (sum)",
            tree["rss_mb"],
            "MB",
            "<= 300",
            at_most(tree["rss_mb"], 300),
            note=f"PSS {tree['pss_mb']} MB; by role: {rss_by}",
        ),
        floor("<=", "idle_tree_rss_mb"),
    )
    for view in ("dashboard", "pipelines", "watch_api"):
        if view in results["system_idle"]:
            w = results["system_idle"][view]
            add(
                Figure(
                    f"live view open ({view}), `system start` tree CPU",
                    w["cpu_percent_of_one_core"],
                    "% of a core",
                    "<= 1 (issue 14)",
                    at_most(w["cpu_percent_of_one_core"], 1),
                )
            )

    if "queue_ops" in results:
        ops = results["queue_ops"]
        add(
            Figure(
                "ledger CPU per job, uncontended (queue_ops)",
                ops["worker_ledger_cpu_us_per_job"],
                "µs",
                "- (diagnostic)",
                None,
                note=f"claim_next {ops['claim_next_us']['cpu']}, record_outcome {ops['record_outcome_us']['cpu']},"
                f" pre-check {ops['precheck_exists_us']['cpu']}, state {ops['plugin_state_current_us']['cpu']}",
            )
        )

    p = results["pipeline"]["summary"]
    hops = p["hop_overhead_ms"]
    worst_hop = max(hops[h]["p50"]["median"] for h in hops)
    add(
        Figure(
            "pipeline, gateway overhead per hop p50 (worst hop)",
            worst_hop,
            "ms",
            "<= 2",
            at_most(worst_hop, 2),
            note=", ".join(f"{h}: p50 {hops[h]['p50']['median']} p99 {hops[h]['p99']['median']}" for h in hops),
        )
    )
    tree_p50, tree_p99 = p["overhead_p50_ms"]["median"], p["overhead_p99_ms"]["median"]
    add(
        Figure("pipeline, 3-step tree overhead p50", tree_p50, "ms", "<= 6", at_most(tree_p50, 6)),
        floor("<=", "pipeline_tree_p50_ms"),
    )
    add(
        Figure(
            "pipeline, 3-step tree overhead p99",
            tree_p99,
            "ms",
            "<= 10",
            at_most(tree_p99, 10),
            note=f"synchronous caller p50 {p['caller_p50_ms']['median']} ms",
        )
    )

    if "scheduler" in results:
        run = results["scheduler"]["runs"][0]
        ticks = run["ticks"]["idle_tick_ms"]["wall"]
        add(Figure("scheduler, 1,000 entries, idle tick p99", ticks["p99"], "ms", "<= 20", at_most(ticks["p99"], 20)))
        for fire in run["fire"]:
            value = fire["created_minus_due_ms"]["p99"]
            add(
                Figure(
                    f"scheduler fire ({fire['scenario']}), created_at - due p99",
                    value,
                    "ms",
                    "<= 1000",
                    at_most(value, 1000),
                )
            )

    for r in results["api"]["runs"]:
        add_api(add, r, same_run)

    if "hostile" in results:
        h = results["hostile"]
        for kind, label in (("healthz", "/healthz"), ("post", "a job POST")):
            p = h["probes"][kind]
            add(
                Figure(
                    f"{label} beside {h['settings']['slow']} slow-header connections and"
                    f" {h['crowd']['streams_open']} open streams (issue 33): p99",
                    p["p99_ms"],
                    "ms",
                    "<= 100, none failed",
                    p["failed"] == 0 and at_most(p["p99_ms"], 100) is True,
                    note=f"p50 {p['p50_ms']} ms, {p['answered']}/{p['probes']} answered",
                )
            )

    if "cli" in results:
        add_cli(add, results["cli"])

    if "console" in results:
        c = results["console"]
        worst = max(c["pages"].items(), key=lambda item: item[1]["p95_ms"])
        add(
            Figure(
                f"audit console, {c['jobs']:,} jobs, slowest page p95",
                worst[1]["p95_ms"],
                "ms",
                "<= 300",
                bool(c["met"]),
                note=f"{worst[0]}; list p95 {c['pages']['list']['p95_ms']} ms",
            )
        )
    return out


def add_cli(add: Callable[..., None], r: dict[str, Any]) -> None:
    """bench_cli.py: each command's CPU over the ORM's import, in the same rounds."""
    baseline = r["commands"]["orm_import"]["cpu_s"]["median"]
    for name, row in r["commands"].items():
        if "target_ratio" not in row:
            continue
        no_orm = row["target_ratio"] < 1
        ratio = row["cpu_ratio"]["median"]
        add(
            Figure(
                f"CLI `ductile {name}`, CPU / the ORM's import",
                ratio,
                "x",
                f"<= {row['target_ratio']:g}" + (" (no ORM loaded)" if no_orm else ""),
                at_most(ratio, row["target_ratio"]),
                note=f"{row['cpu_s']['median']} s against {baseline} s, wall ratio {row['wall_ratio']['median']},"
                f" {r['rounds']} rounds",
            ),
            floor("<=", "cli_no_orm_over_orm" if no_orm else "cli_read_over_orm"),
        )


def add_api(add: Callable[..., None], r: dict[str, Any], same_run: str) -> None:
    variant, rate = r["variant"], r["fixed_rate"]
    p99_target = {"queued": 25, "workers": 25, "drain": 100}[variant]
    label = {
        "queued": "API alone",
        "workers": "API with runworkers running its jobs",
        "drain": "API while runworkers drains a backlog",
    }[variant]
    served, offered = rate["requests_per_s"], rate["rate"]
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(rate["statuses"].items()))
    errors = sum(rate["errors"].values()) + sum(n for k, n in rate["statuses"].items() if not k.startswith("2"))
    check = r["queue_check"]
    drained = r.get("workers", {})
    note = (
        f"p50 {rate['latency_ms']['p50']} ms, served {served}/{offered} per s, errors {errors} ({statuses}),"
        f" API CPU {rate['api_cpu_ms_per_request']} ms per request (client {rate['client_cpu_s']} s),"
        f" job ids missing from the ledger {check['job_ids_missing']}"
        + (f", workers finished {drained['succeeded_by_end']}" if drained else "")
        + (f" (backlog left {drained['backlog_left']})" if "backlog_left" in drained else "")
        + f"; {same_run}"
    )
    add(
        Figure(
            f"{label}, {offered:g} requests/s offered: p99",
            rate["latency_ms"]["p99"],
            "ms",
            f"<= {p99_target}, all served, zero errors, every job in the ledger",
            bool(r["target_met"]),
            note=note,
        ),
        floor("<=", "api_p99_ms"),
    )
    wrong = errors + check["job_ids_missing"]
    add(
        Figure(f"{label}: correctness", float(wrong), "errors + lost job ids", "0", wrong == 0),
        # Never noise: a lost job id or a non-2xx answer is a defect, whatever the load.
        ("0 lost ids, 0 non-2xx, < 1 % socket errors", lambda v: api_correct(r)),
    )
    if r.get("saturation"):
        sat = r["saturation"]
        add(
            Figure(
                f"{label}: saturation (wrk, closed loop)",
                sat["requests_per_s"],
                "requests/s",
                ">= 500" if variant != "drain" else "-",
                at_least(sat["requests_per_s"], 500) if variant != "drain" else None,
                note=f"p99 {sat['latency_ms']['p99']} ms",
            )
        )


def api_correct(r: dict[str, Any]) -> bool:
    rate = r["fixed_rate"]
    non_2xx = sum(n for k, n in rate["statuses"].items() if not k.startswith("2"))
    socket_errors = sum(rate["errors"].values())
    attempted = rate["requests"] + socket_errors
    return r["queue_check"]["job_ids_missing"] == 0 and non_2xx == 0 and socket_errors <= 0.01 * attempted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir")
    parser.add_argument("--quick", action="store_true", help="the CI smoke: under 3 minutes, floors gate")
    args = parser.parse_args()
    out = Path(args.out_dir or tempfile.mkdtemp(prefix="ductile-bench-results-"))
    out.mkdir(parents=True, exist_ok=True)
    started, started_wall = time.monotonic(), dt.datetime.now(dt.UTC)
    where = {**provenance(), "machine": machine()}
    results = run_plan(QUICK if args.quick else FULL, out)
    found = figures(results, args.quick)
    where.update(
        {
            "date_utc_start": started_wall.strftime("%Y-%m-%d %H:%M:%SZ"),
            "date_utc_end": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ"),
            "seconds": round(time.monotonic() - started, 1),
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
            "speed_end": speed_probe(PROBE_SECONDS),
            "mode": "quick" if args.quick else "full",
        }
    )
    regressions = [f.name for f in found if f.above_floor is False]
    summary = {
        "provenance": where,
        "figures": [f.__dict__ for f in found],
        "targets_met": sum(1 for f in found if f.met),
        "targets_missed": [f.name for f in found if f.met is False],
        "gross_regressions": regressions,
        "per_benchmark": {name: r["_run"] for name, r in results.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    m = where["machine"]
    print(
        f"commit {where['commit']}{' (dirty)' if where['dirty'] else ''}, {where['mode']} run,"
        f" {where['date_utc_start']} .. {where['date_utc_end']} ({where['seconds']} s)\n"
        f"machine: {m['cores']} cores, {m['cpu_model']}, {m['ram_gib']} GiB, Python {m['python']},"
        f" SQLite {m['sqlite']}; load (1 min) {m['loadavg_1m_at_start']} at start, {where['loadavg_1m_end']} at end"
    )
    medians = [r["_run"]["speed_before"]["loop_ms_median"] for r in results.values()]
    print(
        f"speed: the probe loop's median {min(medians)}-{max(medians)} ms before the benchmarks,"
        f" {where['speed_end']['loop_ms_median']} ms at the end (best {where['speed_end']['loop_ms_min']} ms)"
    )
    print("\n".join(f.line() for f in found))
    print(f"targets: {summary['targets_met']} met, {len(summary['targets_missed'])} missed; results: {out}")
    if regressions:
        print("GROSS REGRESSION (a floor was crossed): " + "; ".join(regressions))
        sys.exit(1)


if __name__ == "__main__":
    main()
