"""gunicorn's own log lines, as the gateway's: JSON lines (gateway/logs.py) with component `http`,
and the lines a client can cause (a malformed request, a stalled socket) at a bounded rate.

Why. gunicorn writes its error log in a text format of its own, one WARNING per malformed request:
3,000 bad request lines in 0.9 s wrote 345 KB of lines nobody could parse into a log promised as
JSON (issue 33). Now the first such line of a kind is written at once, the next ones at most one
per THROTTLE_SECONDS, each carrying how many were left out since (`suppressed`). What the server
itself has to say (a worker killed, a port taken) is never held back.

`logger_class` in ductile_site/gunicorn.py; the master loads it too, so no Django here.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gunicorn.glogging import Logger

from gateway.logs import JsonFormatter

THROTTLE_SECONDS = 10.0
# What clients cause, by the start of gunicorn's message (gunicorn/workers/base.py, gthread.py).
CLIENT_CAUSED = ("Invalid request from ip=", "Socket error processing request")


class ClientNoise(logging.Filter):
    """At most one line per kind of client-caused message per THROTTLE_SECONDS; the line that
    passes after a quiet spell says how many were left out."""

    def __init__(self, interval: float = THROTTLE_SECONDS) -> None:
        super().__init__()
        self.interval = interval
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        record.component = "http"
        message = record.getMessage()
        kind = next((prefix for prefix in CLIENT_CAUSED if message.startswith(prefix)), None)
        if kind is None:
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(kind, float("-inf")) < self.interval:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return False
            self._last[kind] = now
            suppressed = self._suppressed.pop(kind, 0)
        if suppressed:
            record.detail = f"{suppressed} more like it in the last {self.interval:.0f}s were not logged"
        return True


class ServerLog(Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        handler = self._get_gunicorn_handler(self.error_log)
        if handler is not None:
            handler.setFormatter(JsonFormatter())
        if not any(isinstance(f, ClientNoise) for f in self.error_log.filters):
            self.error_log.addFilter(ClientNoise())
