"""Benchmark: what the live views cost an idle gateway (issue 14: "with the dashboard open, an idle
gateway stays under 1 % of a core").

    .venv/bin/python tests/bench/bench_live_idle.py [--window 60] [--settle 10]
        [--windows idle,dashboard,pipelines,watch_api] [--out FILE]

`manage.py system start` runs as an operator runs it (the API under gunicorn, runworkers,
runscheduler and the housekeeping cluster), on a fresh config with one plugin and no schedules.
One job is run through the API first, so the tree is that of a gateway that has worked (the
worker's lifeline helper, started at its first spawn, is in it); then nothing runs: it is idle.
CPU is the utime + stime (plus that of reaped children) of every process of its tree, read from
/proc/<pid>/stat before and after each --window seconds, after --settle seconds to settle.
Windows, one after another on the same gateway:

1. `idle`: nobody watching. The housekeeping cluster starts with the gateway (the hourly prune is
   due at once) and is stopped once it has had nothing to do for `--housekeeping-linger` (30 s);
   the window begins after that, as an idle gateway spends all but about a minute of each hour
   (`housekeeping_parked_after_s` says when it happened).
2. `dashboard`: one headless Chromium (Debian's, as the browser tests use) logged in and showing
   /dashboard/, its stream open. The browser is not in the gateway's tree: only the gateway's
   cost is counted.
3. `pipelines`: the same browser on /dashboard/pipelines/.
4. `watch_api`: `manage.py system watch --json --api-url` polling GET /system/watch every second
   (the watch process itself is not in the tree either).

Memory, per window, at its end: VmRSS of each process and the sum over the tree, and the sum of
PSS (`/proc/<pid>/smaps_rollup`: shared pages divided among the processes sharing them, so the
sum does not count gunicorn's forked workers' shared pages twice).

Targets (issue 16), on the `idle` window: the whole tree <= 2 % of one core and <= 300 MB RSS in
total; `runworkers` alone <= 1 % (also bench_idle.py). `--windows idle` measures only that
window (no browser needed).

The machine is shared: the 1-minute load average is recorded around each window.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import (
    NOP_SCRIPT,
    PYTHON,
    REPO,
    BenchConfig,
    emit,
    machine,
    sqlite_query,
    stop_process,
    temp_dir,
    wait_until,
)

TOKEN = "bench-live-token"
USER, PASSWORD = "watcher", "correct horse battery staple"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree(root: int) -> list[int]:
    """`root` and every process descended from it, now."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def ticks(pids: list[int]) -> dict[int, int]:
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return out


def wakeups(pids: list[int]) -> dict[int, int]:
    """Times each process's threads have been switched out so far (voluntary and not): on these
    VMs an idle process's CPU is its wake-ups, each costing what REFERENCE_WAKE measures."""
    out = {}
    for pid in pids:
        total = 0
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                status = (task / "status").read_text()
                total += sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)
        except OSError:
            continue
        out[pid] = total
    return out


# A bare Python process that wakes every 5 s (as the idle gateway's threads at most do) and does
# nearly nothing: the CPU one such wake-up costs on this machine now (its own run time from
# /proc/self/schedstat, in ms). It runs beside the window. On these VMs it moves several-fold with
# the host's load, and grows with the time slept before it; the idle tree's CPU moves with it.
REFERENCE_WAKE = """
import sys, threading
def ran(): return int(open("/proc/self/schedstat").read().split()[0])
pause, count = threading.Event(), int(sys.argv[1])
pause.wait(5.0)
start = ran()
for _ in range(count):
    pause.wait(5.0)
print((ran() - start) / count / 1e6)
"""


def reference_wake(window: float) -> subprocess.Popen[str]:
    count = max(2, int(window / 5) - 1)
    return subprocess.Popen([PYTHON, "-c", REFERENCE_WAKE, str(count)], stdout=subprocess.PIPE, text=True)


def command(pid: int) -> str:
    """A process's role in the gateway: `runworkers`, `gunicorn`, `qcluster`, `lifeline helper`, … (its argv)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in argv if w]
    if any(word.endswith("lifeline_helper.py") for word in words):
        return "lifeline helper"
    for word in words:
        if word in ("runworkers", "runscheduler", "qcluster", "gunicorn", "start"):
            return "system start (supervisor)" if word == "start" else word
    return " ".join(words)[:60]


def memory_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, Pss) of one process in kB; zeros for a process that is gone."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def measure(root: int, window: float) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    pids = tree(root)
    reference = reference_wake(window)
    woke = wakeups(pids)
    before, started = ticks(pids), time.monotonic()
    time.sleep(window)
    after, elapsed = ticks(pids), time.monotonic() - started
    woken = wakeups(pids)
    reference_ms = round(float(reference.communicate()[0]), 3)
    # Only processes alive at both ends: the idle gateway starts none (no plugin runs).
    hz = os.sysconf("SC_CLK_TCK")
    by_process: dict[str, float] = {}
    wakeups_by_process: dict[str, int] = {}
    for pid in before:
        if pid in after:
            name = command(pid)
            by_process[name] = round(by_process.get(name, 0) + (after[pid] - before[pid]) / hz, 3)
            if pid in woke and pid in woken:
                wakeups_by_process[name] = wakeups_by_process.get(name, 0) + woken[pid] - woke[pid]
    used = sum(by_process.values())
    rss_mb: dict[str, float] = {}
    count: dict[str, int] = {}
    pss_total = 0
    for pid in after:
        rss, pss = memory_kb(pid)
        name = command(pid)
        rss_mb[name] = round(rss_mb.get(name, 0) + rss / 1024, 1)
        count[name] = count.get(name, 0) + 1
        pss_total += pss
    return {
        "window_s": round(elapsed, 1),
        "processes": len(pids),
        "cpu_s": round(used, 3),
        "cpu_percent_of_one_core": round(100 * used / elapsed, 3),
        "cpu_s_by_process": by_process,
        "cpu_percent_by_process": {k: round(100 * v / elapsed, 3) for k, v in by_process.items()},
        "wakeups_per_minute": round(60 * sum(wakeups_by_process.values()) / elapsed, 1),
        "wakeups_per_minute_by_process": {k: round(60 * v / elapsed, 1) for k, v in wakeups_by_process.items()},
        "reference_wake_cpu_ms": reference_ms,
        "rss_mb": round(sum(rss_mb.values()), 1),
        "pss_mb": round(pss_total / 1024, 1),
        "rss_mb_by_process": rss_mb,
        "processes_by_role": count,
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }


def manage(config: BenchConfig, *args: str, stdin: str | None = None) -> None:
    subprocess.run(
        [PYTHON, str(REPO / "manage.py"), *args, "--config-dir", str(config.path)],
        input=stdin,
        check=True,
        capture_output=True,
        text=True,
        env=config.env(),
        cwd=REPO,
    )


def browser(profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"):
        options.add_argument(arg)
    options.add_argument("--disable-background-networking")
    options.add_argument("--window-size=1400,1000")
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def run(window: float, settle: float, windows: list[str]) -> dict[str, Any]:
    from selenium.webdriver.common.by import By

    with temp_dir("live-idle") as base:
        port = free_port()
        api = {"listen": f"127.0.0.1:{port}", "auth": {"tokens": [{"name": "b", "token": TOKEN, "scopes": ["*"]}]}}
        config = BenchConfig(base, {"nop": NOP_SCRIPT}, extra={"api": api})
        manage(config, "migrate")
        manage(config, "admin", "create-user", USER, "--role", "auditor", "--password-stdin", stdin=PASSWORD)
        log = open(base / "gateway.log", "wb")  # noqa: SIM115 - closed below
        gateway = subprocess.Popen(
            [PYTHON, str(REPO / "manage.py"), "system", "start", "--config-dir", str(config.path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=config.env(),
            cwd=REPO,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        results: dict[str, Any] = {}
        driver = None
        watch = None
        try:
            try:
                wait_until(lambda: gateway.poll() is not None or _up(url), 120, 0.2, "the API")
            except TimeoutError:
                gateway.poll()
            if gateway.returncode is not None or not _up(url):
                log.flush()
                tail = (base / "gateway.log").read_text()[-3000:]
                raise RuntimeError(f"system start did not serve /healthz (exit {gateway.returncode}):\n{tail}")
            up = time.monotonic()
            run_one_job(url, config)
            parked = b"housekeeping stopped while idle"
            wait_until(lambda: parked in (base / "gateway.log").read_bytes(), 180, 0.5, "the idle cluster to stop")
            parked_after = round(time.monotonic() - up, 1)
            time.sleep(settle)
            results["idle"] = {**measure(gateway.pid, window), "housekeeping_parked_after_s": parked_after}
            if windows == ["idle"]:
                return results

            driver = browser(base / "chromium")
            driver.get(url + "/admin/login/?next=/dashboard/")
            driver.find_element(By.ID, "id_username").send_keys(USER)
            driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
            driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
            for page in ("dashboard", "pipelines"):
                if page == "pipelines":
                    driver.get(url + "/dashboard/pipelines/")
                wait_until(
                    lambda: driver.find_element(By.ID, "dash-status").get_attribute("data-state") == "live",
                    60,
                    0.2,
                    f"the {page} page's stream",
                )
                time.sleep(settle)
                results[page] = measure(gateway.pid, window)
            driver.quit()
            driver = None

            argv = ["system", "watch", "--json", "--api-url", url, "--api-key", TOKEN, "--config-dir", str(config.path)]
            watch = subprocess.Popen(
                [PYTHON, str(REPO / "manage.py"), *argv],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=config.env(),
                cwd=REPO,
            )
            time.sleep(settle)
            results["watch_api"] = measure(gateway.pid, window)
        finally:
            if driver is not None:
                driver.quit()
            if watch is not None:
                stop_process(watch)
            stop_process(gateway, timeout=60)
            log.close()
        return results


def run_one_job(url: str, config: BenchConfig) -> None:
    """`POST /plugin/nop/poll`, then wait until the job has succeeded in the ledger."""
    request = urllib.request.Request(
        url + "/plugin/nop/poll",
        data=b"{}",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        job_id = json.load(response)["job_id"]
    statement = "SELECT status FROM job_queue WHERE id = ?"
    wait_until(lambda: sqlite_query(config.db_path, statement, (job_id,)) == [("succeeded",)], 60, 0.2, "the job")


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument(
        "--windows", default="idle,dashboard,pipelines,watch_api", help="`idle` alone: no browser, no watcher"
    )
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    emit(
        {
            "benchmark": "live_idle",
            "commit": commit.stdout.strip(),
            "machine": machine(),
            **run(args.window, args.settle, args.windows.split(",")),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
