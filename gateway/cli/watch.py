"""`ductile system watch`: the live figures in a terminal (spec 000 "Monitoring & Observability",
Real-Time Dashboard (TUI)): queue, running jobs, throughput and failures over the last hour,
plugin latency, circuit breakers, next runs, latest failures, pipelines and recent events.

The figures are the dashboard's (`gateway.reports.live`), read from the local ledger or over the API
(`GET /system/watch`). The view redraws every `interval` seconds on the terminal's alternate
screen and quits on `q` or Ctrl+C; the terminal's modes are restored however it ends.

What plugins and agents named or wrote (errors, event types, plugin and step names) is shown as
text, never as rich markup (`[link=…]`, `[blink]`), with its control characters escaped.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from types import FrameType
from typing import IO, Any, Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gateway.cli.api_call import Writable, build_call, send
from gateway.reports import live, parse_rfc3339
from gateway.runtime import Runtime
from gateway.terminal import one_line

QUIT_KEYS = frozenset("qQ")
TWO_COLUMNS = 110  # terminal width from which the sections sit side by side
SPARK = "▁▂▃▄▅▆▇█"
STYLES = {
    "queued": "blue",
    "running": "yellow",
    "succeeded": "green",
    "failed": "red",
    "timed_out": "red",
    "dead": "red",
    "closed": "green",
    "half_open": "yellow",
    "open": "bold red",
}


class WatchError(Exception):
    """The figures could not be read (the API refused or could not be reached)."""


class Source(Protocol):
    where: str

    def get(self) -> dict[str, Any]: ...


class LocalSource:
    """This machine's ledger, through the same shared builder the dashboard uses."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.where = f"local ledger ({runtime.config.config_dir})"

    def get(self) -> dict[str, Any]:
        return live.LIVE_FIGURES.get(self.runtime)


class ApiSource:
    """A gateway's `GET /system/watch` (scope jobs:ro), asked with the ETag of the snapshot in
    hand: while nothing moved the answer is a bodiless 304 and the snapshot is kept."""

    def __init__(self, base: str, token: str | None, timeout: float = 10.0):
        self.call = build_call("/system/watch", base=base, token=token)
        self.timeout = timeout
        self.where = base
        self.last: tuple[str, dict[str, Any]] | None = None

    def get(self) -> dict[str, Any]:
        call = self.call
        if self.last is not None:
            call = replace(call, headers={**call.headers, "If-None-Match": self.last[0]})
        try:
            answer = send(call, timeout=self.timeout)
        except OSError as exc:
            raise WatchError(f"cannot reach {call.url}: {exc}") from exc
        if answer.status == 304 and self.last is not None:
            return self.last[1]
        body = answer.parsed()
        if not answer.ok:
            reason = body.get("error") if isinstance(body, dict) else None
            raise WatchError(f"GET {call.url} answered {answer.status} {answer.reason}: {reason or body}")
        if not isinstance(body, dict):
            raise WatchError(f"GET {call.url} did not answer a JSON object")
        if etag := answer.headers.get("ETag"):
            self.last = (etag, body)
        return body


# -- rendering ----------------------------------------------------------------------------------


def ago(when: str | None, now: datetime) -> str:
    if not when:
        return "-"
    delta = (now - parse_rfc3339(when)).total_seconds()
    return f"{span(delta)} ago" if delta >= 0 else f"in {span(-delta)}"


def span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def ms(ns: int | None) -> str:
    if ns is None:
        return "-"
    value = ns / 1e6
    if value >= 1000:
        return f"{value / 1000:.1f} s"
    return f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms"


def sparkline(values: list[int]) -> str:
    """One character per value, scaled to the largest; a blank for none at all."""
    top = max(values, default=0)
    return "".join(SPARK[v * len(SPARK) // (top + 1)] if v else " " for v in values)


def status_text(status: str) -> Text:
    return Text(status.replace("_", " "), style=STYLES.get(status, ""))


def section(title: str, table: Table, empty: str) -> Panel:
    body: RenderableType = table if table.row_count else Text(empty, style="dim italic")
    return Panel(body, title=f"[bold]{title}[/]", title_align="left", border_style="grey50")


def plain(value: Any) -> Any:
    """`value` with every string on one line and its control characters escaped (gateway.terminal)."""
    if isinstance(value, str):
        return one_line(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def cells(*values: RenderableType) -> list[RenderableType]:
    """A table row's cells: a string as text, which rich would otherwise read as markup."""
    return [Text(value) if isinstance(value, str) else value for value in values]


# The columns of names and words, which share what the figures leave, in these proportions, and
# are shortened with an ellipsis in a narrow terminal; the others (ids, counts, durations, ages,
# states) are shown whole.
WORDS = {
    "plugin.command": 2,
    "worker": 1,
    "error": 4,
    "type": 2,
    "source": 1,
    "plugin": 1,
    "pipeline": 1,
    "trigger": 1,
    "schedule": 1,
}


def grid(*columns: str) -> Table:
    """A section's table: its headers and short values are never cut ("attem…", "0c9bd…" at 120
    columns before); the words columns take the rest of the width."""
    table = Table(box=None, expand=True, pad_edge=False, show_edge=False, header_style="bold dim")
    for name in columns:
        table.add_column(
            name,
            overflow="ellipsis",
            no_wrap=True,
            ratio=WORDS.get(name),
            width=len(name) if name in WORDS else None,
            min_width=len(name),
        )
    return table


PANEL_FRAME = 4  # a panel's borders and padding, left and right
FIGURE_GAP = "   "


def packed(figures: list[Text], width: int) -> Text:
    """The figures on as many lines as `width` needs, a line breaking between two figures, never
    inside one ("0" at the end of a line and "retry waiting" on the next, at 80 columns before)."""
    lines: list[Text] = [Text()]
    for figure in figures:
        line = lines[-1]
        if line and line.cell_len + len(FIGURE_GAP) + figure.cell_len > width:
            lines.append(Text())
            line = lines[-1]
        if line:
            line.append(FIGURE_GAP)
        line.append_text(figure)
    return Text("\n").join(lines)


def render(snapshot: dict[str, Any], *, now: datetime, where: str, width: int, note: str = "") -> RenderableType:
    """The whole view for one snapshot. `now` is the gateway's clock (the snapshot's time plus
    what passed since it was read), so ages do not depend on this machine's clock."""
    snapshot = plain(snapshot)
    gateway = snapshot["gateway"]
    # Two lines, each cut with an ellipsis rather than wrapped into the next at any width.
    header = Group(
        Text.assemble(
            ("Ductile ", "bold"),
            (f"{gateway['name']} ", "bold cyan"),
            (f"v{gateway['version']}", "dim"),
            f"  {where}",
            no_wrap=True,
            overflow="ellipsis",
        ),
        Text.assemble(
            (f"{gateway['database']}", "dim"),
            "  ",
            (f"as of {snapshot['generated_at']}", "dim"),
            no_wrap=True,
            overflow="ellipsis",
        ),
    )
    queue = snapshot["queue"]
    workers = snapshot["workers"]
    figures = [Text.assemble((f"{n:,}", "bold"), " ", status_text(status)) for status, n in queue.items()]
    figures.append(Text.assemble((f"{snapshot['retry_waiting']:,}", "bold"), " retry waiting"))
    figures.append(
        Text.assemble((f"{len(workers)}", "bold"), f" live workers ({sum(w['threads'] for w in workers)} threads)")
    )
    counts = packed(figures, width - PANEL_FRAME)
    # Jobs no live node runs wait without a word otherwise (issue 38); a gateway before it sends none.
    unserved = [
        Text.assemble(
            ("unserved ", "bold red"),
            (u["plugin"], "bold"),
            f": {u['queued']:,} queued, no live node runs it (the oldest {ago(u['oldest_queued_at'], now)})",
        )
        for u in snapshot.get("unserved", [])
    ]
    t = snapshot["throughput"]
    rate = "-" if t["failure_rate"] is None else f"{100 * t['failure_rate']:.1f}%"
    throughput = Group(
        Text.assemble(
            ("last hour ", "dim"),
            (f"{t['finished_last_hour']:,}", "bold"),
            f" ended ({t['jobs_per_minute']}/min), ",
            (f"{t['failed_last_hour']:,}", "bold red" if t["failed_last_hour"] else "bold"),
            f" failed ({rate})",
        ),
        Text.assemble(("ended  ", "dim"), (sparkline(t["finished"]), "green")),
        Text.assemble(("failed ", "dim"), (sparkline(t["failed"]), "red")),
    )
    top = Panel(
        Group(counts, *unserved, throughput),
        title="[bold]Queue and throughput[/]",
        title_align="left",
        border_style="grey50",
    )

    running = grid("job", "plugin.command", "attempt", "elapsed", "worker")
    for job in snapshot["running"]:
        elapsed = job["elapsed_seconds"] + (now - parse_rfc3339(snapshot["generated_at"])).total_seconds()
        running.add_row(
            *cells(
                job["job_id"][:8],
                f"{job['plugin']}.{job['command']}",
                f"{job['attempt']}/{job['max_attempts']}",
                span(elapsed),
                job["claimed_by"] or "-",
            )
        )
    latency = grid("plugin", "runs", "p50", "p95", "p99", "max")
    for p in snapshot["latency"]["plugins"]:
        times = p["plugin_time_ns"]
        latency.add_row(
            *cells(p["plugin"], str(p["count"]), ms(times["p50"]), ms(times["p95"]), ms(times["p99"]), ms(times["max"]))
        )
    failures = grid("job", "plugin.command", "status", "ended", "error")
    for job in snapshot["failures"]:
        failures.add_row(
            *cells(
                job["job_id"][:8],
                f"{job['plugin']}.{job['command']}",
                status_text(job["status"]),
                ago(job["completed_at"], now),
                Text(job["last_error"] or "-", style="red"),
            )
        )
    breakers = grid("plugin.command", "state", "failures", "opened")
    for b in snapshot["breakers"]:
        breakers.add_row(
            *cells(
                f"{b['plugin']}.{b['command']}",
                status_text(b["state"]),
                str(b["failure_count"]),
                ago(b["opened_at"], now),
            )
        )
    schedules = grid("schedule", "command", "next run", "last fired")
    for s in snapshot["schedules"]:
        schedules.add_row(
            *cells(
                f"{s['plugin']}:{s['schedule_id']}",
                s["command"],
                ago(s["next_run_at"], now),
                ago(s["last_fired_at"], now),
            )
        )
    pipelines = grid("pipeline", "trigger", "last run", "started")
    for p in snapshot["pipelines"]:
        run = p["last_run"]
        pipelines.add_row(
            *cells(
                p["name"],
                p["trigger"],
                status_text(run["status"]) if run else Text("never ran", style="dim"),
                ago(run["started_at"], now) if run else "-",
            )
        )
    events = grid("#", "type", "source", "job", "at")
    for e in snapshot["recent_events"]:
        events.add_row(
            *cells(str(e["id"]), e["type"], e["source"] or "-", (e["job_id"] or "-")[:8], ago(e["created_at"], now))
        )

    left = [
        section(f"Running ({len(snapshot['running'])})", running, "nothing running"),
        section("Latest failures", failures, "no failed jobs"),
        section("Recent events", events, "no events yet"),
    ]
    right = [
        section("Plugin latency (last hour)", latency, "no plugin ran in the last hour"),
        section("Circuit breakers", breakers, "no breaker yet"),
        section("Next scheduled runs", schedules, "no active schedule"),
        section("Pipelines", pipelines, "no pipelines configured"),
    ]
    if width >= TWO_COLUMNS:
        body = Table.grid(expand=True, padding=(0, 1))
        body.add_column(ratio=1)
        body.add_column(ratio=1)
        body.add_row(Group(*left), Group(*right))
        sections: RenderableType = body
    else:
        sections = Group(*left, *right)
    footer = Text(note, style="dim")
    return Group(header, top, sections, footer)


# -- the live view ------------------------------------------------------------------------------


@contextmanager
def keys_without_echo(stream: IO[str]) -> Iterator[Callable[[float], str]]:
    """Single key presses from the terminal (cbreak: no line editing, no echo; Ctrl+C still
    interrupts), as a function that waits up to a timeout; the terminal's modes come back on exit."""
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read(timeout: float) -> str:
        ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
        return os.read(fd, 32).decode(errors="replace") if ready else ""

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class Watch:
    """The live view: reads the figures every `interval` seconds, redraws, and waits for keys in
    between. `run()` returns when `q` is pressed or on Ctrl+C/SIGTERM."""

    def __init__(self, source: Source, console: Console, interval: float, keys: IO[str] = sys.stdin):
        self.source, self.console, self.interval, self.keys = source, console, interval, keys
        self.snapshot: dict[str, Any] | None = None
        self.read_at = 0.0
        self.error: str | None = None

    def run(self) -> None:
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            with (
                keys_without_echo(self.keys) as read_key,
                Live(console=self.console, screen=True, auto_refresh=False, redirect_stdout=False) as screen,
            ):
                while True:
                    self.refresh()
                    screen.update(self.view(), refresh=True)
                    deadline = time.monotonic() + self.interval
                    while (left := deadline - time.monotonic()) > 0:
                        if QUIT_KEYS & set(read_key(left)):
                            return
        except KeyboardInterrupt:
            return
        finally:
            signal.signal(signal.SIGTERM, previous)

    def refresh(self) -> None:
        try:
            self.snapshot, self.read_at, self.error = self.source.get(), time.monotonic(), None
        except WatchError as exc:
            self.error = one_line(str(exc))  # shown over the last figures; the next refresh tries again

    def view(self) -> RenderableType:
        note = f"q quit · refreshing every {self.interval:g}s"
        if self.snapshot is None:
            return Group(
                Text(self.error or "reading the figures…", style="bold red" if self.error else ""),
                Text(note, style="dim"),
            )
        now = parse_rfc3339(self.snapshot["generated_at"]) + timedelta(seconds=time.monotonic() - self.read_at)
        view = render(self.snapshot, now=now, where=self.source.where, width=self.console.width, note=note)
        return Group(Text(f"stale: {self.error}", style="bold red"), view) if self.error else view


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the view's `finally` blocks restore the terminal


def print_once(source: Source, console: Console) -> None:
    snapshot = source.get()
    console.print(
        render(snapshot, now=parse_rfc3339(snapshot["generated_at"]), where=source.where, width=console.width)
    )


def json_lines(source: Source, out: Writable, interval: float, once: bool) -> None:
    """One snapshot as JSON, or with `once` false one compact line per `interval` until Ctrl+C or
    SIGTERM (how an agent's tool or a supervisor ends a stream), either of which exits 0."""
    if once:
        out.write(json.dumps(source.get(), indent=2) + "\n")
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        while True:
            out.write(json.dumps(source.get(), separators=(",", ":")) + "\n")
            out.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return
    finally:
        signal.signal(signal.SIGTERM, previous)
