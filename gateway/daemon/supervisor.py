"""`system start`: the API (gunicorn), the webhook listener (a second gunicorn on its own port),
`runworkers`, the scheduler and the housekeeping cluster (django-q2's `qcluster`), as one
supervised process tree (ARCHITECTURE "Processes"). The scheduler runs on a thread of this process
(gateway.daemon.resident); the others are child processes. A node of a cluster runs only its roles
(`--role`, ROLES: the listeners, the workers, optionally of one worker group, the scheduler, the
housekeeping), and a reload then matches the listeners to the config only on a node with the api role.

The housekeeping cluster runs on demand: five processes and about 350 MB that would otherwise sit
idle between an hourly prune and a daily backup. The supervisor asks whether housekeeping is due
or queued (`Demand`: every 5 s while the cluster runs or has work, every 30 s while parked); it
starts the cluster when it is, and stops it (SIGTERM, which the cluster drains) once there has
been none for a while. An idle stop is not a death: it neither restarts the cluster nor counts
towards its flapping.

SIGHUP reloads the config here first, from the files on disk. Only a config that loads is handed on:
as the runtime snapshot every child runs on (gateway/runtime.py), then SIGHUP to every child that
reloads (each reads the snapshot: gunicorn's workers in place, gateway.http's `reload_runtime`;
the daemons at their next pass); the housekeeping cluster has no reload of its own: the supervisor
refreshes its schedules from the new config instead (`on_config`). A config that does not load is
refused here, logged with every problem, and no process is told: all keep the runtime they run.
SIGTERM/SIGINT go to every child (each drains), and the supervisor waits for them. A child that
dies is restarted with a growing delay, for as long as the tree runs: one that cannot stay up (a
port in use, a broken config, a database it cannot open) is logged as an error at every restart,
and never takes its healthy siblings down with it (issue 12: a runworkers dying on a full disk
stopped the API and the webhooks too). The PID file lets `system reload` find us.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from gateway.config.errors import ConfigError
from gateway.daemon.config_snapshots import record_config
from gateway.daemon.control import pid_file_for, running_pid, snapshot_file_for
from gateway.daemon.presence import Presence
from gateway.daemon.resident import Loop, Resident
from gateway.daemon.scheduler import Scheduler
from gateway.daemon.tree import CHILDREN_FILE, SUPERVISOR_ENV, end_dead_tree, record_children
from gateway.execution.pause import Pause
from gateway.logs import logger
from gateway.runtime import (
    SNAPSHOT_ENV,
    STARTED_ENV,
    Runtime,
    RuntimeHolder,
    build_runtime,
    write_snapshot,
)
from gateway.storage.database import ensure_schema
from gateway.version import ENTRY_POINT_ENV, entry_point

log = logger("supervisor")

REPO = Path(__file__).resolve().parent.parent.parent
GUNICORN_CONFIG = REPO / "ductile_site" / "gunicorn.py"
# A child that dies within STABLE_AFTER seconds of starting, this many times in a row, is not
# coming up by itself: each further restart is an error in the log. One that ran longer was up:
# its next death starts the count (and the delay) over.
FLAP_LIMIT, STABLE_AFTER = 5, 60.0
# Restart delays: 1, 2, 4, ... seconds, then every RESTART_CEILING seconds.
RESTART_CEILING = 60
STOP_GRACE = 60.0
# The supervisor's longest sleep between passes, when no restart or demand question is due sooner.
# Whatever needs it sooner wakes it: signals (`signal.set_wakeup_fd`), a child process's death
# (SIGCHLD) among them, and a resident loop's end (`Resident`'s `on_end`). Why not shorter: each
# pass of an idle supervisor is a wake-up, which costs CPU (docs/performance-history.md, item 37).
MAX_PASS = 30.0


@dataclass(frozen=True)
class Demand:
    """When an on-demand child runs. `wanted(running)` is asked every `every` seconds while the
    child runs or was wanted, every `idle_every` while it is stopped without work: True starts the
    child; False for `linger` seconds in a row stops a running one. It may raise: the child is
    then left as it is, and the failure logged. Why ask a stopped child's question less often:
    each question wakes the supervisor and opens a connection (the housekeeping cluster's work is
    an hourly prune and a daily backup, which may start that much later)."""

    wanted: Callable[[bool], bool]
    every: float = 5.0
    linger: float = 30.0
    idle_every: float = 30.0


@dataclass
class Child:
    name: str
    argv: list[str]
    env: Mapping[str, str]
    # Whether SIGHUP reloads it; django-q2's cluster would simply die of one.
    reloads: bool = True
    demand: Demand | None = None
    # A loop run on a thread of the supervisor instead of `argv` in a process (gateway.daemon.resident).
    resident: Callable[[], Loop] | None = None
    process: subprocess.Popen[bytes] | Resident | None = None
    # Deaths in a row, each within STABLE_AFTER seconds of its start.
    failures: int = 0
    started_at: float = 0.0
    restart_at: float = 0.0
    # On-demand children only: whether there is work for it, when it was last asked, since when it
    # has had none, whether it was told to stop for that, and whether the last question failed.
    needed: bool = True
    asked_at: float = float("-inf")
    idle_since: float | None = None
    parked: bool = False
    asking_fails: bool = False
    # A listener a reload stopped: to start again on its new address ("moved") or not ("dropped").
    retired: str | None = None

    def __post_init__(self) -> None:
        self.needed = self.demand is None  # an on-demand child waits for its first answer

    def start(self, wake: Callable[[], None] | None = None) -> None:
        """`wake`: what a resident loop calls when it ends, so its supervisor sees it at once."""
        self.started_at = time.monotonic()
        if self.resident is not None:
            self.process = Resident(self.name, self.resident(), on_end=wake)
            log.info("started %s (on a thread of the supervisor, pid %d)", self.name, self.process.pid)
            return
        # Own session: a terminal's Ctrl+C reaches only the supervisor, which forwards it once; a
        # child receiving it twice (directly and forwarded) would take it as "force".
        self.process = subprocess.Popen(self.argv, env={**os.environ, **self.env}, cwd=REPO, start_new_session=True)
        log.info("started %s (pid %d)", self.name, self.process.pid)

    def died(self, code: int, now: float) -> None:
        """Schedule the restart of a child that exited with `code`."""
        self.failures = self.failures + 1 if now - self.started_at < STABLE_AFTER else 1
        delay = min(2 ** (self.failures - 1), RESTART_CEILING)
        if self.failures >= FLAP_LIMIT:
            log.error(
                "%s keeps exiting (%d times in a row, each within %.0fs of starting; last exit %s): restarting it "
                "in %ds; the other processes keep running. Its own log lines above say why.",
                self.name,
                self.failures,
                STABLE_AFTER,
                code,
                delay,
            )
        else:
            log.warning("%s exited with %s; restarting in %ds", self.name, code, delay)
        self.process, self.restart_at = None, now + delay

    def exited(self, code: int, now: float) -> None:
        if self.retired is not None:
            # Stopped by a reload: no death, nothing to count. A moved listener starts again at once.
            log.info("%s stopped (exit %s): %s by the reloaded config", self.name, code, self.retired)
            self.process, self.retired, self.restart_at = None, None, now
            return
        if not self.parked:
            self.died(code, now)
            return
        # Told to stop because it had nothing to do: it starts again when there is something.
        log.info("%s stopped while idle (exit %s); it starts again when there is work for it", self.name, code)
        self.process, self.parked, self.restart_at = None, False, now

    def next_question(self) -> float:
        """When an on-demand child's question is due (monotonic seconds)."""
        assert self.demand is not None
        stopped_without_work = self.process is None and not self.needed
        return self.asked_at + (self.demand.idle_every if stopped_without_work else self.demand.every)

    def ask(self, now: float) -> None:
        """Put the on-demand question; park a running child that has been idle for `linger`."""
        assert self.demand is not None
        self.asked_at = now
        running = self.process is not None and self.process.poll() is None
        try:
            wanted = self.demand.wanted(running)
        except Exception:
            # Why leave it as it is: a database that cannot answer right now says nothing about
            # whether a task is in flight. Logged once per spell of failures, not every few seconds.
            if not self.asking_fails:
                state = "running" if running else "stopped"
                log.exception("could not tell whether %s has work; leaving it %s", self.name, state)
            self.asking_fails = True
            return
        if self.asking_fails:
            log.info("%s: asking for work succeeds again", self.name)
        self.asking_fails = False
        self.needed = wanted
        if wanted:
            if not running:
                log.info("%s has work: starting it", self.name)
            self.idle_since = None
            return
        if not running or self.parked:
            return
        if self.idle_since is None:
            self.idle_since = now
        elif now - self.idle_since >= self.demand.linger:
            log.info("%s has had no work for %.0fs: stopping it until there is", self.name, now - self.idle_since)
            self.parked, self.idle_since = True, None
            self.signal(signal.SIGTERM)

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)


def resident_scheduler(config_dir: Path, snapshot: Path) -> Scheduler:
    """A scheduler with a runtime of its own, read from the snapshot now, as a `runscheduler`
    process under the supervisor would at its start: it reads the snapshot again on SIGHUP."""
    holder = RuntimeHolder()
    holder.load(config_dir, snapshot=snapshot)
    return Scheduler(holder, install_signals=False)


def gunicorn(app: str, bind: str) -> list[str]:
    return [sys.executable, "-m", "gunicorn", "-c", str(GUNICORN_CONFIG), "--bind", bind, app]


def child_env(runtime: Runtime, config_dir: Path) -> dict[str, str]:
    """What every child of one `system start` is told, once: a listener a reload starts later is
    told the same (the gateway's start time among it: the API's uptime)."""
    return {
        "DUCTILE_CONFIG_DIR": str(config_dir),
        SNAPSHOT_ENV: str(snapshot_file_for(runtime.config)),
        STARTED_ENV: str(time.time()),
        ENTRY_POINT_ENV: entry_point(),  # what /healthz reports as `binary_path`
        SUPERVISOR_ENV: str(os.getpid()),  # each child dies with us (gateway/daemon/tree.py)
    }


LISTENERS = ("api", "webhooks")


def listeners(runtime: Runtime, env: Mapping[str, str]) -> list[Child]:
    """The HTTP listeners this config asks for, each a gunicorn bound to its address: the API
    (`api.enabled`, `api.listen`) and the webhook listener (`webhooks.listen`). A reload runs this
    again: the supervisor starts, stops or moves them to match (`Supervisor._relisten`)."""
    children = []
    if runtime.config.api.enabled:
        children.append(Child("api", gunicorn("ductile_site.wsgi:application", str(runtime.config.api.listen)), env))
    if runtime.webhooks.listen is not None:
        bind = str(runtime.webhooks.listen)
        children.append(Child("webhooks", gunicorn("gateway.http.webhooks.wsgi:application", bind), env))
    return children


LISTENER_NAMES = {"api": "the API", "webhooks": "the webhook listener"}


def listener_changes(old: Runtime, new: Runtime) -> list[str]:
    """What a reload from `old` to `new` does to the listeners (`Supervisor._relisten`), in words
    for its answer: `the webhook listener starts on 127.0.0.1:8081`."""
    before, after = _addresses(old), _addresses(new)
    changes = []
    for name, what in LISTENER_NAMES.items():
        was, now = before.get(name), after.get(name)
        if was == now:
            continue
        if was is None:
            changes.append(f"{what} starts on {now}")
        elif now is None:
            changes.append(f"{what} on {was} stops")
        else:
            changes.append(f"{what} moves from {was} to {now}")
    return changes


def _addresses(runtime: Runtime) -> dict[str, str]:
    return {c.name: _bind(c) for c in listeners(runtime, {})}


def _bind(listener: Child) -> str:
    return listener.argv[listener.argv.index("--bind") + 1]


# What one `system start` may run, each a role a node of a cluster takes or leaves (`--role`):
# the HTTP listeners (the API and the webhook listener), the worker daemon, the scheduler, the
# housekeeping cluster.
ROLES = ("api", "workers", "scheduler", "housekeeping")


def parse_roles(values: Sequence[str]) -> frozenset[str]:
    """`--role` as given, repeated or comma-separated (`--role api,scheduler --role workers`);
    every role when none is given. ValueError names a role that is not one."""
    chosen = {role.strip() for value in values for role in value.split(",") if role.strip()}
    unknown = sorted(chosen - set(ROLES))
    if unknown:
        raise ValueError(f"unknown role {', '.join(map(repr, unknown))}: the roles are {', '.join(ROLES)}")
    return frozenset(chosen or ROLES)


def plan(
    runtime: Runtime,
    config_dir: Path,
    *,
    listen: bool = True,
    workers: bool = True,
    group: str | None = None,
    scheduler: bool = True,
    housekeeping: Demand | None = None,
) -> list[Child]:
    """The children this config asks for; the housekeeping cluster only with its `Demand`.
    `group`: the workers run only that group of `service.worker_groups`."""
    python = sys.executable
    manage = str(REPO / "manage.py")
    common = ["--config-dir", str(config_dir)]
    snapshot = snapshot_file_for(runtime.config)
    env = child_env(runtime, config_dir)
    children = listeners(runtime, env) if listen else []
    if workers:
        grouped = ["--group", group] if group is not None else []
        children.append(Child("runworkers", [python, manage, "runworkers", *common, *grouped], env))
    if scheduler:
        # On a thread of the supervisor, not a process of its own (gateway.daemon.resident).
        children.append(Child("runscheduler", [], env, resident=lambda: resident_scheduler(config_dir, snapshot)))
    if housekeeping is not None:
        qcluster = [python, manage, "qcluster", *common]
        children.append(Child("housekeeping", qcluster, env, reloads=False, demand=housekeeping))
    return children


class CannotStart(Exception):
    """Why `system start` cannot start (before any child ran)."""


class AlreadyRunning(CannotStart):
    """Another live `system start` holds the PID lock."""


class Supervisor:
    def __init__(
        self,
        children: Sequence[Child],
        holder: RuntimeHolder,
        *,
        install_signals: bool = True,
        on_config: Callable[[bool], None] | None = None,
        listen: bool = True,
    ):
        """`holder`: the supervisor's own runtime, loaded from the config files, which its
        children run on through the snapshot. `on_config(reloaded)` runs once the schema is
        current, and again after each SIGHUP whose config loaded. `listen`: this node runs the
        listeners (the `api` role), which a reload starts, stops or moves to match the config."""
        self.children = list(children)
        self.listen = listen
        self.holder = holder
        config = holder.get().config
        self.pid_file = pid_file_for(config)
        self.snapshot = snapshot_file_for(config)
        self.tree_record = self.pid_file.parent / CHILDREN_FILE
        self.install_signals = install_signals
        self.on_config = on_config
        self.stopping = False
        self._pending: list[int] = []
        self._pause: Pause | None = None
        # What a listener a reload adds is told: what the first listener was (or `child_env`'s).
        listener = next((c for c in self.children if c.name in LISTENERS), None)
        self.listener_env = listener.env if listener else child_env(holder.get(), config.config_dir)

    def run(self) -> int:
        self._take_the_lock()
        # Before any child starts: each reads it. Failing here (a full or read-only state
        # directory) stops the start, with why: no child could run on what this process loaded.
        try:
            write_snapshot(self.holder.get(), self.snapshot)
        except OSError as exc:
            raise CannotStart(f"cannot write the runtime snapshot its processes run on: {exc}") from exc
        ensure_schema()  # once, here: the children then find a current database
        record_config(self.holder.get(), "start")
        self._configure(reloaded=False)
        self._write_pid()
        if self.install_signals:
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, self._on_signal)
            # Only to wake the pass: the pass itself finds which child exited. Restarting system
            # calls (SA_RESTART), so one in the resident loops' threads is not cut short by it.
            signal.signal(signal.SIGCHLD, lambda signum, frame: None)
            signal.siginterrupt(signal.SIGCHLD, False)
        # Why a pause a signal ends rather than a short fixed sleep: each pass of an idle
        # supervisor costs CPU (five a second were ~0.3 % of a core on a 2-core VM).
        self._pause = Pause(signals=self.install_signals)
        for child in self.children:
            if child.demand is None:
                child.start(self._wake)  # the on-demand ones at their first answer, in _watch
        self._record_tree()
        roles = self._own_roles()
        presence = Presence(roles, self.holder.get().config.service.lease_ttl) if roles else None
        try:
            while True:
                self._handle_signals()
                if self.stopping:
                    break
                self._watch()
                beat = presence.beat() if presence is not None else MAX_PASS
                self._sleep(min(self._next_pass(), beat))
            self._wait_all()
        finally:
            if presence is not None:
                presence.leave()
            self._remove_pid()
            self._pause.close()
            if self.install_signals:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        log.info("system stopped")
        return 0

    def _own_roles(self) -> set[str]:
        """The roles this process takes itself, for its node row (gateway.daemon.presence): the
        listeners, the resident scheduler, housekeeping. The workers' daemon keeps a row of its
        own."""
        roles = {"api"} if self.listen else set()
        names = {child.name for child in self.children}
        if "runscheduler" in names:
            roles.add("scheduler")
        if "housekeeping" in names:
            roles.add("housekeeping")
        return roles

    def _next_pass(self) -> float:
        """Seconds until the next pass has something to do: a demand question or a restart."""
        now = time.monotonic()
        due = now + MAX_PASS
        for child in self.children:
            if child.demand is not None:
                due = min(due, child.next_question())
            if child.process is None and child.needed:
                due = min(due, child.restart_at)
        return max(due - now, 0.0)

    def _sleep(self, seconds: float) -> None:
        assert self._pause is not None  # made by `run` before its first pass
        self._pause.sleep(seconds)

    def _wake(self) -> None:
        if self._pause is not None:
            self._pause.wake()  # a no-op once the pause is closed

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(signum)

    def _handle_signals(self) -> None:
        while self._pending:
            signum = self._pending.pop(0)
            if signum == signal.SIGHUP:
                self._reload()
            elif not self.stopping:
                log.info("signal %d: draining every process (send again to force)", signum)
                self.stopping = True
                self._stop_all(signal.SIGTERM)
            else:
                log.warning("second signal: forcing every process down")
                self._stop_all(signal.SIGTERM)  # each daemon treats a second signal as "force"

    def _reload(self) -> None:
        """The config from disk; if it loads, every process is handed it, else none is told."""
        config_dir = self.holder.get().config.config_dir
        try:
            runtime = build_runtime(config_dir)
            write_snapshot(runtime, self.snapshot)
        except ConfigError as exc:
            log.error("SIGHUP: the config does not load, so no process reloads; each keeps the one it runs:\n%s", exc)
            return
        except OSError as exc:
            log.error("SIGHUP: the reloaded config could not be handed to the processes (%s); each keeps its own", exc)
            return
        self.holder.install(runtime)
        log.info("SIGHUP: config reloaded; every process reloads it")
        if self.listen:
            self._relisten(listeners(runtime, self.listener_env))
        record_config(runtime, "reload")
        for child in self.children:
            if child.reloads and child.retired is None:  # one that is stopping needs no reload
                child.signal(signal.SIGHUP)
        self._configure(reloaded=True)
        for child in self.children:
            child.asked_at = float("-inf")  # the new config may have made work due: ask now

    def _relisten(self, wanted: list[Child]) -> None:
        """Match the listeners to the reloaded config: start one it adds (a webhooks.yaml written
        since the start), stop one it drops, and move one whose address changed (gunicorn keeps the
        address it was started with through a SIGHUP): stopped, then started again on the new one
        once the old has let go of its port. `_watch` starts what is due."""
        now = time.monotonic()
        running = {c.name: c for c in self.children if c.name in LISTENERS}
        asked = {c.name: c for c in wanted}
        for name, child in running.items():
            new = asked.get(name)
            if new is None:
                if child.needed:
                    log.info("%s: the reloaded config no longer asks for it; stopping it", name)
                    child.needed = False
                    self._retire(child, "dropped")
            elif new.argv != child.argv or not child.needed:
                where = _bind(new)
                log.info("%s: the reloaded config asks for it on %s; (re)starting it there", name, where)
                child.argv, child.needed, child.failures = new.argv, True, 0
                if not self._retire(child, "moved"):
                    child.restart_at = now
        for name, new in asked.items():
            if name not in running:
                log.info("%s: the reloaded config asks for it; starting it", name)
                self.children.append(new)

    def _retire(self, child: Child, why: str) -> bool:
        """Ask a running listener to stop (it drains); False when it was not running."""
        if child.process is None or child.process.poll() is not None:
            return False
        child.retired = why
        child.signal(signal.SIGTERM)
        return True

    def _configure(self, *, reloaded: bool) -> None:
        if self.on_config is None:
            return
        try:
            self.on_config(reloaded)
        except Exception:
            # The children run on regardless; what failed is logged with its traceback.
            log.exception("applying the %s config to the supervisor failed", "reloaded" if reloaded else "loaded")

    def _watch(self) -> None:
        """Restart the children that died, each after its delay; start and park the on-demand ones."""
        now = time.monotonic()
        for child in self.children:
            if child.demand is not None and now >= child.next_question():
                child.ask(now)
            if child.process is None:
                if child.needed and now >= child.restart_at:
                    child.start(self._wake)
                    self._record_tree()
                continue
            code = child.process.poll()
            if code is not None:
                child.exited(code, now)

    def _stop_all(self, signum: int) -> None:
        for child in self.children:
            child.signal(signum)

    def _wait_all(self) -> None:
        deadline = time.monotonic() + STOP_GRACE
        for child in self.children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; killing it", child.name, STOP_GRACE)
                child.process.kill()
                if isinstance(child.process, Resident):
                    continue  # a thread cannot be killed: being daemonic, it ends with this process
                child.process.wait()

    def _take_the_lock(self) -> None:
        """Refuse to start beside a live gateway of this config; end what a killed one left."""
        try:
            pid = running_pid(self.pid_file)
        except ValueError:
            pid = None  # not a PID lock we can read: overwritten below
        if pid is not None and pid != os.getpid():
            raise AlreadyRunning(f"a gateway already runs on this state directory (pid {pid}, {self.pid_file})")
        ended = end_dead_tree(self.tree_record, log.warning)
        if ended:
            log.warning("ended %d process group(s) a killed gateway had left running", ended)

    def _record_tree(self) -> None:
        pids = [c.process.pid for c in self.children if isinstance(c.process, subprocess.Popen)]
        try:
            record_children(self.tree_record, pids)
        except OSError as exc:
            log.warning("could not record the children (%s): a kill -9 of this process would leave them", exc)

    def _write_pid(self) -> None:
        """The PID lock, 0600 like every lock file of the gateway (spec 000 §13.2)."""
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.pid_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)  # a stale file a killed gateway left keeps its old mode through O_CREAT
        with os.fdopen(fd, "w") as out:
            out.write(f"{os.getpid()}\n")

    def _remove_pid(self) -> None:
        try:
            if self.pid_file.read_text().strip() == str(os.getpid()):
                self.pid_file.unlink()
                self.snapshot.unlink(missing_ok=True)
                self.tree_record.unlink(missing_ok=True)
        except OSError:
            pass
