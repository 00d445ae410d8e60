"""gunicorn settings for the API and the webhook listener (`system start` passes `--bind`).

Threads, not processes, carry concurrency: a synchronous pipeline call or an SSE stream holds its
thread while it waits, and SQLite's single writer gains nothing from more processes. Settings can
be overridden by the usual GUNICORN_CMD_ARGS.
"""

from __future__ import annotations

import os

workers = int(os.environ.get("DUCTILE_API_PROCESSES", "2"))
worker_class = "gthread"
threads = int(os.environ.get("DUCTILE_API_THREADS", "16"))
# A synchronous pipeline may wait up to api.max_sync_timeout; SSE streams send keep-alives.
timeout = int(os.environ.get("DUCTILE_API_TIMEOUT", "330"))
graceful_timeout = 30
keepalive = 5
accesslog = None  # the gateway logs what matters as JSON lines; no second, differently shaped log
errorlog = "-"
loglevel = "warning"
