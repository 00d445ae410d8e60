"""gunicorn settings for the API and the webhook listener (`system start` passes `--bind`).

Threads, not processes, carry concurrency: a synchronous pipeline call or an SSE stream holds its
thread while it waits, and SQLite's single writer gains nothing from more processes. Settings can
be overridden by the usual GUNICORN_CMD_ARGS.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

workers = int(os.environ.get("DUCTILE_API_PROCESSES", "2"))
# gthread with a front door: a request costs a thread only once it has all arrived, and an event
# stream none at all (gateway/http/frontdoor.py: slow and idle clients, issue 33).
worker_class = "gateway.http.frontdoor.FrontDoorWorker"
threads = int(os.environ.get("DUCTILE_API_THREADS", "16"))
# Open connections per process, idle and unfinished ones included; past it the oldest of those is
# closed to make room, so the door never shuts.
worker_connections = int(os.environ.get("DUCTILE_API_CONNECTIONS", "1000"))
# A synchronous pipeline may wait up to api.max_sync_timeout; SSE streams send keep-alives.
timeout = int(os.environ.get("DUCTILE_API_TIMEOUT", "330"))
graceful_timeout = 30
keepalive = 5
accesslog = None  # the gateway logs what matters as JSON lines; no second, differently shaped log
errorlog = "-"
# gunicorn's own lines as the gateway's JSON lines, and what clients cause at a bounded rate.
logger_class = "gateway.http.serverlog.ServerLog"
loglevel = "warning"


def on_starting(server: Any) -> None:
    """In the master, before any worker: refuse a corrupted SQLite ledger (issue 12) with the
    finding alone and exit 1. Why here and not in the WSGI module: a worker that fails to load
    halts gunicorn, but with two or more failing at once gunicorn prints a traceback of its own.
    Why in a child process: the check loads the config and Django's database layer, which the
    master would then hold for its whole life without using them again (49 MB against 26 MB;
    docs/performance.md, "Idle"). The child prints the finding on stderr."""
    # Here, as every import of ours in this file: gunicorn's master reads it, and holds for its
    # whole life what it imports.
    from gateway.daemon.tree import die_with_supervisor

    die_with_supervisor()  # a child of `system start`: the master, and with it its workers, end with it
    check = subprocess.run([sys.executable, "-c", _START_CHECK, str(_REPO)], check=False)
    if check.returncode != 0:
        sys.exit(1)


_REPO = Path(__file__).resolve().parent.parent
_START_CHECK = (
    "import sys; sys.path.insert(0, sys.argv[1]); from gateway.http.start_check import start_check; start_check()"
)


# How long gunicorn's loops sleep when nothing wakes them: its master and each worker otherwise
# wake every second, half of an idle gateway's wake-ups, and on a small VM each wake-up of an
# idle process costs ~1-3 ms of CPU (docs/performance-history.md, item 36). What wakes them sooner is
# unchanged: a signal (the master's queue; a worker's stop defers a call to its poller), a
# connection, a finished request. The loops' timed duties have longer deadlines: the master's
# check of worker heartbeats (`timeout`, 330 s), a worker's heartbeat, its close of idle
# keep-alive connections (`keepalive`, 5 s, so now after 5-10 s) and its look for a dead master.
QUIET_LOOP_SECONDS = 5.0


def when_ready(server: Any) -> None:
    _quiet_loop(server, "wait_for_signals", lambda: True)
    _reload_in_place(server)


def _reload_in_place(server: Any) -> None:
    """SIGHUP to the master makes every worker reload the gateway's runtime in place (`system
    start` sends it after writing the new runtime snapshot, gateway/runtime.py), instead of
    gunicorn's own reload: new workers forked and set up, old ones stopped, which stalled the API
    about a second per reload (73 of 179 POSTs over 1 s in a burst of 20 reloads, issue 33) and
    ended every event stream. gunicorn dispatches a signal to the arbiter's `handle_<name>`."""

    def handle_hup() -> None:
        server.log.info("SIGHUP: every worker reloads the gateway's runtime in place")
        server.kill_workers(signal.SIGHUP)

    server.handle_hup = handle_hup


def post_worker_init(worker: Any) -> None:
    _quiet_loop(worker, "wait_for_and_dispatch_events", lambda: worker.alive)
    _end_streams_on_stop()
    # Signal handlers only queue the reload: it runs on the worker's loop, between its events.
    signal.signal(signal.SIGHUP, lambda signum, frame: worker.method_queue.defer(_reload_runtime))
    _freeze_startup_objects()
    # Imported here, in the worker: ledger.writes loads Django, which the master never does.
    from gateway.storage.checkpoints import CheckpointThread
    from ledger.writes.group_commit import hand_the_gil_back_sooner, share_transactions

    hand_the_gil_back_sooner()  # a write-gate holder gets the GIL back within 0.5 ms, not 5
    share_transactions()  # many request threads enqueue at once: one writer thread commits them together
    CheckpointThread.start()  # and no COMMIT of theirs copies the log back into the file


def _reload_runtime() -> None:
    """A worker's reload: the snapshot the supervisor wrote (or the config files, when gunicorn
    runs alone). A runtime that does not load leaves this worker on the one it runs."""
    # Imported here, in the worker: the master never loads the config (on_starting).
    from gateway.config.errors import ConfigError
    from gateway.logs import logger
    from gateway.runtime import RUNTIME

    try:
        RUNTIME.reload()
    except ConfigError as exc:
        logger("api").error("reload failed; this process keeps the config it runs: %s", exc)


def _freeze_startup_objects() -> None:
    """A full garbage collection walks every tracked object, and holds the GIL (so every thread of
    the worker) while it does. After start-up most objects are Django's and the app's, which live
    as long as the worker: importing the URLconf now (Django would on the first request) and then
    freezing takes them out of the collector's walk. Full collections under load went from ~60 ms
    to ~17 ms, and the API's p99 with them (docs/performance.md, "API")."""
    # Imported here, in the worker: the master never loads Django (on_starting).
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports every view module
    gc.collect()
    gc.freeze()


def _quiet_loop(owner: Any, method: str, running: Callable[[], bool]) -> None:
    """Make `owner`'s main loop, which waits by `method(timeout=1.0)`, wait QUIET_LOOP_SECONDS
    instead while `running()`; every other wait (a draining worker's) is left as asked. gunicorn
    before 27 waits in methods of other names: there the loops keep their second."""
    wait = getattr(type(owner), method, None)
    if wait is None:
        return

    def quieter(timeout: float = 1.0) -> Any:
        return wait(owner, QUIET_LOOP_SECONDS if timeout == 1.0 and running() else timeout)

    setattr(owner, method, quieter)


def _end_streams_on_stop() -> None:
    """A worker asked to stop (SIGTERM from the arbiter: shutdown, HUP reload, or a scale-down)
    waits for its open requests up to graceful_timeout, and an SSE stream never finishes on its
    own. So the worker's SIGTERM also ends every stream (gateway.http.eventstream.stop_streams); gunicorn
    has no hook there, so its handler is wrapped. SIGINT/SIGQUIT already exit at once. An app
    without streams (the webhook listener) never imports the module, and has none to end."""
    stop = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: FrameType | None) -> None:
        streams = sys.modules.get("gateway.http.eventstream")
        if streams is not None:
            streams.stop_streams()
        if callable(stop):
            stop(signum, frame)

    signal.signal(signal.SIGTERM, on_term)


def worker_exit(server: Any, worker: Any) -> None:
    """A stopping worker writes what it counted of failed API authentications and rejected webhook
    deliveries and had not written yet (gateway/http/refusals.py: once an interval, so up to an
    interval's worth)."""
    for counter in ("gateway.http.api.auth", "gateway.http.webhooks.views"):
        module = sys.modules.get(counter)
        if module is not None:
            module.REFUSALS.flush()
