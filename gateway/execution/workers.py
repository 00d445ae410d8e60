"""The `runworkers` daemon: a pool of threads claiming jobs, plus a main loop that heartbeats,
recovers lost jobs and reloads config. Spec 000 §3.5, §11.2, §11.3; ARCHITECTURE "Processes"."""

from __future__ import annotations

import functools
import gc
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection
from datetime import timedelta
from types import FrameType

from django.db import DatabaseError, close_old_connections, connection, connections
from django.utils import timezone

from gateway.config.errors import ConfigError
from gateway.execution.dispatch import Executor, recovery_ending
from gateway.execution.leases import Leases
from gateway.execution.lifecycle import schedule_inits
from gateway.execution.pause import Pause
from gateway.execution.runner import kill_live_groups
from gateway.logs import logger
from gateway.runtime import Runtime, RuntimeHolder
from gateway.storage.checkpoints import Activity, Checkpointer
from gateway.storage.database import describe_database
from gateway.storage.outage import Outage
from gateway.storage.wake_listener import WakeListener
from gateway.version import gateway_version
from ledger.caps import Cap
from ledger.models import Job, WorkerInstance
from ledger.models.workers import beat_every
from ledger.writes.autocheckpoint import Announcement, checkpoints_elsewhere
from pipelines.dsl import CORE_HOPS

log = logger("workers")

# The main loop's longest sleep while no job is claimed, when no heartbeat or recovery pass is due
# sooner. Signals and the end of a worker thread wake it at once (gateway.execution.pause).
IDLE_PASS = 5.0
# The longest wait between an idle pool's timed looks while nothing at all is queued for it: the
# interval (`recheck`) doubles after each such look, up to this. What ends an empty queue's idle
# (an enqueue, on this host or through PostgreSQL's NOTIFY) wakes the pool at once; the timed look
# is for what nothing announces, and with a job queued (a retry time to come, a plugin at its cap)
# it stays at `recheck`.
IDLE_RECHECK_CEILING = 5.0


class WorkerDaemon:
    def __init__(
        self,
        holder: RuntimeHolder,
        *,
        threads: int | None = None,
        plugins: Collection[str] | None = None,
        group: str | None = None,
        once: bool = False,
        max_jobs: int | None = None,
        recheck: float = 0.5,
        install_signals: bool = True,
    ):
        self.holder = holder
        runtime = holder.get()
        self.threads = threads or runtime.config.service.max_workers
        self.plugins = frozenset(plugins) if plugins else None
        self.group = group  # the `service.worker_groups` entry `plugins` came from, re-read at each reload
        self.once = once
        self.max_jobs = max_jobs
        self.recheck = recheck
        self.install_signals = install_signals
        self.hostname = socket.gethostname()
        self.worker_id = f"{self.hostname}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.leases = Leases()
        self.executor = Executor(holder, self.worker_id, claim_next=self._claim_following, leases=self.leases)
        # The queue's methods on one QuerySet made once: `Job.objects.claim_next` builds a new
        # QuerySet (and its Query) at every call, ~10 µs of each job's claim.
        self._queue = Job.objects.all()
        self.stopping = threading.Event()
        self._reload = threading.Event()
        self._signals = 0
        self._wake = threading.Condition()
        self._wake_seq = 0
        self._direct = 0  # pokes from other processes not yet taken by a woken thread (`poked`)
        self._looker: int | None = None  # the idle thread that re-checks on the timer (`_idle_wait`)
        self._empty_looks = 0  # the looks in a row that found nothing queued (`_idle_wait`)
        self._pause: Pause | None = None  # the main loop's sleep, while `run` runs
        self._ending: list[threading.Thread] = []  # pool threads past their loop, for the main loop to join
        self._count_lock = threading.Lock()
        self.claimed = 0
        self._busy = 0
        # Ids of the jobs an execution thread is running now (under _count_lock): the heartbeat
        # renews these and no others, so a job whose execution ended without an outcome expires.
        self._in_flight: set[str] = set()
        lease_ttl = runtime.config.service.lease_ttl
        self._claims_down = Outage("claiming jobs", log, floor=max(recheck, 0.1), ceiling=10.0)
        self._beat_down = Outage("heartbeat", log, floor=0.5, ceiling=beat_every(lease_ttl))
        self._recovery_down = Outage("recovering lost jobs", log, floor=min(5.0, lease_ttl / 2), ceiling=30.0)
        self._checkpoints = Checkpointer()
        self._checkpoint_down = Outage("checkpointing the database", log, floor=1.0, ceiling=30.0)

    # -- lifecycle -------------------------------------------------------------------------

    def run(self) -> int:
        """On a ledger whose schema is current: `runworkers` checked it (DuctileCommand.open_ledger)
        with the ledger's integrity, before this; checked again here, it was read twice at every
        start."""
        runtime = self.holder.get()
        instance = WorkerInstance.objects.register(
            self.worker_id,
            hostname=self.hostname,
            pid=os.getpid(),
            threads=self.threads,
            plugins=",".join(sorted(self.plugins or ())),
            group=self.group or "",
        )
        if self.install_signals:
            self._install_signal_handlers()
        self._recover()
        schedule_inits(runtime)
        # What start-up built lives as long as the daemon: out of the collector's walk, so a full
        # collection under load does not hold the GIL through Django's objects (as in the API's
        # workers, ductile_site/gunicorn.py). Frozen as it is: a full collection first took ~35 ms
        # of the start and found a dozen unreachable objects (docs/performance-history.md, item 30).
        gc.freeze()
        # Enqueues of this process call self.wake directly, others' come through its socket.
        listener = WakeListener(self.wake, on_poke=self.poked)
        listener.start()
        log.info(
            "runworkers started: %d threads, plugins %s, database %s",
            self.threads,
            ",".join(sorted(self._caps(runtime))) or "(none loaded)",
            describe_database(),
            extra={"worker": self.worker_id},
        )
        self._pause = Pause(signals=self.install_signals)
        pool = [threading.Thread(target=self.work, name=f"ductile-worker-{n}") for n in range(self.threads)]
        for thread in pool:
            thread.start()
        try:
            with checkpoints_elsewhere() as announcement:
                self._main_loop(pool, instance, runtime.config.service.lease_ttl, announcement)
        finally:
            self.stopping.set()
            self.wake()
            for thread in pool:
                thread.join()
            self._pause.close()
            self._pause = None
            listener.stop()
            try:
                instance.stop(timezone.now())
            except DatabaseError as exc:
                # The row stays `running`; the next daemon on this host finds its PID gone.
                log.error("could not record this worker as stopped: %s", exc, extra={"worker": self.worker_id})
            log.info("runworkers stopped after %d jobs", self.claimed, extra={"worker": self.worker_id})
            connections.close_all()
        return 0

    def _main_loop(
        self, pool: list[threading.Thread], instance: WorkerInstance, lease_ttl: float, announcement: Announcement
    ) -> None:
        """Heartbeat, recovery and reloads until the pool ends. A database error here never ends
        the daemon (issue 12: a full disk took it down for good): the step is retried with a
        growing delay, and in-flight plugins keep running meanwhile."""
        beats, recover_every = beat_every(lease_ttl), min(5.0, lease_ttl / 2)
        start = time.monotonic()
        next_beat, next_recover, next_checkpoint = start + beats, start + recover_every, start
        assert self._pause is not None
        seen = -1
        activity = Activity(self.claimed, start)
        described = False
        while any(t.is_alive() for t in pool):
            # Four passes a second while jobs are claimed; idle, only when a heartbeat or recovery
            # pass is due, IDLE_PASS at most. Why: each wake-up of an idle process costs CPU, ~1-3 ms
            # on a cold core of a 2-core VM (docs/performance-history.md item 31). A signal, a worker
            # thread's end or a checkpoint due (`_wake_for_checkpoint`) wakes it at once.
            tick = 0.25
            if self.claimed == seen:
                tick = min(IDLE_PASS, max(tick, min(next_beat, next_recover) - time.monotonic()))
            seen = self.claimed
            if self._pause.sleep(tick):
                with self._count_lock:
                    ending, self._ending = self._ending, []
                for thread in ending:
                    thread.join(timeout=1.0)  # it said it ends, but may not have ended yet
            if not described:
                # At the first pass, not at registration: reading the version imports
                # importlib.metadata, ~5 ms that the start (exec to first claim) need not wait for.
                self._attempt(self._beat_down, lambda: instance.describe(gateway_version()), 0.0)
                described = not self._beat_down.failures
            if self._reload.is_set():
                self._reload.clear()
                try:
                    self.reload()
                except DatabaseError as exc:
                    log.error(
                        "config reloaded, but the database refused its follow-up (cancelling jobs of removed "
                        "plugins, init jobs): %s",
                        exc,
                    )
            now = time.monotonic()
            busy = activity.busy(self.claimed, now)
            if now >= next_beat:
                next_beat = now + self._attempt(self._beat_down, lambda: self._beat(instance, lease_ttl), beats)
            # Not while our own heartbeat fails: our leases may have run out meanwhile, and the
            # pass would recover our own running jobs from under us once the database is back.
            if now >= next_recover and not self._beat_down.failures:
                next_recover = now + self._attempt(self._recovery_down, self._recover, recover_every)
            # Off the workers' commits, where a checkpoint held the write gate (gateway/storage/checkpoints.py).
            if now >= next_checkpoint:
                step = functools.partial(self._checkpoint, announcement, busy)
                next_checkpoint = now + self._attempt(self._checkpoint_down, step, 0.0)

    def _attempt(self, outage: Outage, step: Callable[[], object], every: float) -> float:
        """Run one housekeeping step; the seconds until its next run."""
        try:
            step()
        except DatabaseError as exc:
            close_old_connections()  # a connection the error left unusable is reopened next time
            return outage.failed(exc)
        outage.recovered()
        return every

    def _beat(self, instance: WorkerInstance, lease_ttl: float) -> None:
        with self._count_lock:
            in_flight = list(self._in_flight)
        now = timezone.now()
        Job.objects.heartbeat(self.worker_id, in_flight, lease_ttl, now=now)
        self.leases.renewed(in_flight, now + timedelta(seconds=lease_ttl))
        instance.beat(timezone.now())

    def _checkpoint(self, announcement: Announcement, busy: bool) -> None:
        """A checkpoint when one is due, and the announcement follows the claims: while this daemon
        claims jobs, the other processes' COMMITs leave the checkpoints to it; idle, it first copies
        back what its jobs left when that is much, then lets them checkpoint again. Why: a daemon
        that claims nothing (its plugins at their caps, jobs it does not serve) checkpoints nothing,
        and an API enqueueing meanwhile would let the log grow to BESIDE_CHECKPOINTER_PAGES before
        one of its COMMITs copied it all, with the write gate held (docs/performance-history.md, item 44)."""
        if busy:
            announcement.hold(True)
            self._checkpoints.after(self.claimed)
        elif announcement.held:
            self._checkpoints.after(self.claimed, going_idle=True)
            announcement.hold(False)

    def stop(self) -> None:
        self.stopping.set()
        self.wake()

    def wake(self) -> None:
        with self._wake:
            self._wake_seq += 1
            self._wake.notify_all()

    def poked(self) -> None:
        """Another process enqueued: one woken thread claims at once, without the read-only look
        (the job is there, or about to be: the poke comes before the enqueue's commit, which the
        claim waits for at the write gate). The others look first, as after any wake-up: claiming
        too, each took the gate for nothing, once ahead of the thread with the job."""
        with self._wake:  # re-entrant: `wake` takes it again
            self._direct = min(self._direct + 1, self.threads)
            self.wake()

    # -- workers -------------------------------------------------------------------------

    def work(self) -> None:
        """One pool thread's loop: claim, run, record (and claim the next with it), until stopped,
        `max_jobs`, or, with `once`, an idle queue. Public so a test can drive one thread of the
        daemon without its start-up duties (tests/support: run_until_idle)."""
        idle = True
        job: Job | None = None
        try:
            while not self.stopping.is_set():
                if job is None:
                    if self.max_jobs is not None and self.claimed >= self.max_jobs:
                        break
                    seen = self._wake_seq
                    try:
                        job = self._claim(precheck=idle)
                    except Exception as exc:
                        # A database that refuses the claim (a full disk, a restart) must not end
                        # this thread: it waits, longer at each failure, and tries again.
                        close_old_connections()
                        self.stopping.wait(self._claims_down.failed(exc))
                        idle = True
                        continue
                    self._claims_down.recovered()
                    if job is not None:
                        self._hand_over_looking()
                    elif not idle:
                        self._take_over_looking()
                    idle = job is None
                if job is not None:
                    job = self._run(job)
                    continue
                if self.once and self._pass_done():
                    break
                with self._wake:
                    if self._wake_seq == seen and not self.stopping.is_set():
                        self._wake.wait(timeout=self._idle_wait())
                    if self._direct:  # `poked`: the first thread awake claims at once
                        self._direct -= 1
                        idle = False
        finally:
            self._hand_over_looking()
            self.wake()
            connections.close_all()
            if self._pause is not None:
                with self._count_lock:
                    self._ending.append(threading.current_thread())
                self._pause.wake()  # the main loop sees the pool shrink now, not at its next pass

    def _idle_wait(self) -> float | None:
        """How long an idle thread sleeps unless woken (called holding `_wake`). One idle thread
        at a time re-checks the database every `recheck` seconds, for what no wake-up announces (a
        retry time that came due, a lost poke); the others sleep until woken. Why not all: each
        wake-up of an idle process costs CPU, ~1-3 ms on a cold core of a 2-core VM, and the
        threads woke together, so the looks also contended for the GIL (docs/performance-history.md,
        item 31)."""
        me = threading.get_ident()
        if self._looker is None or self._looker == me:
            self._looker = me
            return min(self.recheck * 2 ** min(self._empty_looks, 16), max(self.recheck, IDLE_RECHECK_CEILING))
        return None

    def _take_over_looking(self) -> None:
        """A thread idle after a job does the timed looks from now, at `recheck`: the job may have
        left a retry time to come, or freed its plugin's cap, that the looking thread, asleep for
        up to IDLE_RECHECK_CEILING, would see late."""
        with self._wake:
            self._looker = threading.get_ident()
            self._empty_looks = 0

    def _hand_over_looking(self) -> None:
        """A thread that stops being idle passes the timed re-check on to an idle one, if any."""
        with self._wake:
            if self._looker == threading.get_ident():
                self._looker = None
                self._wake.notify()

    def _run(self, job: Job) -> Job | None:
        """Run one claimed job; the next one when it was claimed with this one's outcome."""
        following = None
        try:
            following = self.executor.execute(job)
        except Exception:
            log.exception(
                "unexpected error running job; its lease will expire and it will be retried",
                extra={"job_id": job.id, "plugin": job.plugin},
            )
        finally:
            with self._count_lock:
                if following is not None:
                    # Counted before the finished job is let go, so `--once` never sees an idle
                    # moment between the two.
                    self._busy += 1
                    self.claimed += 1
                    self._in_flight.add(following.id)
                self._busy -= 1
                self._in_flight.discard(job.id)
            if following is not None:
                self._wake_for_checkpoint()
            # A finished job may have freed a slot of its plugin's cap, which an idle thread can
            # take; not when this thread took it again for the next job of the same plugin. (The
            # children it routed wake the idle threads through their enqueue, unless this thread
            # took the only one: ledger.job_notifications.EnqueueTally.)
            if following is None or following.plugin != job.plugin:
                self.wake()
        return following

    def _pass_done(self) -> bool:
        with self._count_lock:
            return self._busy == 0

    def _claim(self, *, precheck: bool) -> Job | None:
        runtime = self.holder.get()
        caps = self._caps(runtime)
        if not caps:
            return None
        now = timezone.now()
        # After an empty claim, a read-only look first, so an idle daemon never takes SQLite's
        # write lock; while work flows the claim itself is the look.
        if precheck:
            connection.close_if_unusable_or_obsolete()  # drops one broken by a database restart
            look = self._queue.look(list(caps), now)
            with self._wake:
                self._empty_looks = 0 if look.queued else self._empty_looks + 1
            if not look.due:
                return None
        with self._count_lock:
            if self.max_jobs is not None and self.claimed >= self.max_jobs:
                return None
            self._busy += 1
        job = None
        try:
            job = self._queue.claim_next(
                worker_id=self.worker_id,
                caps=caps,
                lease_ttl=runtime.config.service.lease_ttl,
                now=now,
                slots=self.threads,
            )
        finally:
            # Why finally: a claim that raised must give back its `_busy` count, or `--once`
            # would wait for it forever.
            with self._count_lock:
                if job is None:
                    self._busy -= 1
                else:
                    self.claimed += 1
                    self._in_flight.add(job.id)
        if job is not None:
            self._wake_for_checkpoint()
        return job

    def _wake_for_checkpoint(self) -> None:
        """After a claim: the main loop checkpoints every few hundred claims (Checkpointer), which
        at hundreds of jobs a second may come sooner than its next pass (four a second); left to
        its passes, the WAL grew past the automatic checkpoint's length (docs/performance-history.md,
        item 42)."""
        pause = self._pause
        if pause is not None and self._checkpoints.due(self.claimed):
            pause.wake()

    def _claim_following(self) -> Job | None:
        """The next job, claimed inside the transaction that records the outcome of the one this
        thread just ran (gateway.execution.dispatch.Executor._claim_following). Counted by `_run`
        once that transaction committed."""
        if self.stopping.is_set() or (self.max_jobs is not None and self.claimed >= self.max_jobs):
            return None
        runtime = self.holder.get()
        caps = self._caps(runtime)
        if not caps:
            return None
        return self._queue.claim_next(
            worker_id=self.worker_id, caps=caps, lease_ttl=runtime.config.service.lease_ttl, slots=self.threads
        )

    def _caps(self, runtime: Runtime) -> dict[str, Cap]:
        caps = runtime.claim_caps()
        if self.plugins is not None:
            # A group runs its plugins and the pipelines' core hops (`if:` switches, relay sends):
            # without them a cluster of group nodes left every pipeline with such a step waiting.
            caps = {name: cap for name, cap in caps.items() if name in self.plugins or name in CORE_HOPS}
        return caps

    # -- housekeeping --------------------------------------------------------------------

    def _recover(self) -> None:
        now = timezone.now()
        dead = WorkerInstance.objects.dead_on_host(self.hostname, exclude=self.worker_id)
        if dead:
            WorkerInstance.objects.mark_lost(dead, now)
            log.warning("workers %s on this host are gone; recovering their jobs", ", ".join(dead))
        runtime = self.holder.get()
        recovered = Job.objects.recover_lost(
            now=now,
            dead_workers=dead,
            ending=recovery_ending(runtime),
            default_dedupe_ttl=runtime.config.service.dedupe_ttl,
        )
        for job in recovered:
            log.warning(
                "recovered lost job: now %s (attempt %d/%d)",
                job.status,
                job.attempt,
                job.max_attempts,
                extra={"job_id": job.id, "plugin": job.plugin},
            )
        if dead or recovered:
            self.wake()

    def reload(self) -> bool:
        """SIGHUP: a new config snapshot, or the old one kept when the new one is invalid."""
        try:
            new, old = self.holder.reload()
        except ConfigError as exc:
            log.error("config reload failed; keeping the running config: %s", exc)
            return False
        removed = set(old.registry.instances) - set(new.registry.instances) if old else set()
        if removed:
            cancelled = Job.objects.cancel_queued(removed, "plugin removed or disabled by config reload")
            log.warning(
                "plugins %s removed or disabled: %d queued jobs now dead", ", ".join(sorted(removed)), len(cancelled)
            )
        schedule_inits(new)
        if self.group is not None:
            self._regroup(new)
        log.info("config reloaded: %d plugins loaded", len(new.registry.instances))
        self.wake()
        return True

    def _regroup(self, runtime: Runtime) -> None:
        """The group's plugins as the reloaded config names them: claimed from now on, and on
        this worker's row, which `system status` and the unserved-plugin check read."""
        assert self.group is not None
        try:
            plugins = frozenset(runtime.config.service.worker_group(self.group))
        except ValueError as exc:
            log.error("%s; this worker keeps claiming %s", exc, ",".join(sorted(self.plugins or ())))
            return
        if plugins != self.plugins:
            self.plugins = plugins
            WorkerInstance.objects.serve(self.worker_id, ",".join(sorted(plugins)))
            log.info("worker group %s now claims %s", self.group, ",".join(sorted(plugins)))

    def _install_signal_handlers(self) -> None:
        def on_stop(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            if self._signals == 1:
                log.info("signal %s: no new claims; waiting for in-flight jobs (send again to force)", signum)
                self.stop()
            else:
                log.warning("second signal: killing in-flight plugins; their jobs will be recovered on restart")
                kill_live_groups()
                os._exit(130)

        def on_hup(signum: int, frame: FrameType | None) -> None:
            self._reload.set()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)
