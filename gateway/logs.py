"""Log lines on stdout: timestamp, level, component, plugin, job_id, message (spec §11.4), as JSON
or, with `service.log_format: text`, as `key=value` text for a person reading a terminal."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gateway.terminal import CONTROLS
from ledger.timestamps import rfc3339

_EXTRA_KEYS = (
    "plugin",
    "job_id",
    "worker",
    "command",
    "dedupe_key",
    "existing_job_id",
    "detail",
    # Who knocked at the console's, the API's or a webhook's door (gateway/console/logins.py,
    # gateway/http/refusals.py).
    "username",
    "client_ip",
    "failures",
    "locked_out",
)
# Made once: `json.dumps(..., default=str)` builds an encoder per line, and the worker logs a line per job.
_LINE_ENCODER = json.JSONEncoder(default=str)


def _unchanged(text: str) -> str:
    return text


# Hides the loaded config's secrets in every line: the worker logs a plugin's stderr and errors,
# which carry whatever the plugin printed. Set when a config loads (gateway.runtime); until one
# has, no secret is known.
_scrub: Callable[[str], str] = _unchanged


def hide_secrets(scrub: Callable[[str], str]) -> None:
    global _scrub
    _scrub = scrub


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return _LINE_ENCODER.encode(self.fields(record))

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        scrub = _scrub
        line: dict[str, Any] = {
            "timestamp": rfc3339(datetime.fromtimestamp(record.created, UTC), "milliseconds"),
            "level": record.levelname,
            "component": getattr(record, "component", record.name.removeprefix("ductile.")),
            "message": scrub(record.getMessage()),
        }
        for key in _EXTRA_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                line[key] = scrub(value) if isinstance(value, str) else value
        if record.exc_info:
            line["exception"] = scrub(self.formatException(record.exc_info))
        return line


class TextFormatter(JsonFormatter):
    """The same fields as `key=value` pairs (logfmt, as Go's slog text handler writes them): a
    value with a space, a quote, an `=` or a control character is quoted, with JSON's escapes,
    also for the characters JSON leaves as they are (C1 controls, bidi overrides, separators:
    gateway.terminal), which would act on the terminal that shows the line."""

    def format(self, record: logging.LogRecord) -> str:
        line = self.fields(record)
        head = {"time": line.pop("timestamp"), "level": line.pop("level"), "component": line.pop("component")}
        head["msg"] = line.pop("message")
        return " ".join(f"{key}={_text_value(value)}" for key, value in {**head, **line}.items())


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else _LINE_ENCODER.encode(value)
    if text and not any(c in text for c in ' "=') and text.isprintable():
        return text
    return CONTROLS.sub(_json_escape, json.dumps(text, ensure_ascii=False))


def _json_escape(match: Any) -> str:
    return json.dumps(match.group())[1:-1]  # `\u202e`; a surrogate pair beyond the BMP


class RaisedOnly(logging.Filter):
    """Records that carry an exception: of Django's request log, the requests that raised."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.exc_info is not None


_FORMATTERS: dict[str, type[JsonFormatter]] = {"json": JsonFormatter, "text": TextFormatter}

# An operator's override of `service.log_level` for one process tree, without editing the config
# (the config's seal makes that an act of its own): read as the level is applied.
LEVEL_ENV = "DUCTILE_LOG_LEVEL"
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


# The same for `service.log_format` (json or text): `./scripts/demo` sets text for its terminal.
FORMAT_ENV = "DUCTILE_LOG_FORMAT"

# The DUCTILE_LOG_LEVEL value last said to name no level: said once, not at every load of the config.
_unknown_said: str | None = None


def apply_service_logging(level: str, line_format: str = "json") -> None:
    """The gateway's log lines from `service.log_level` (spec 000 §11.4; debug, info, warn or
    error, in either case), unless DUCTILE_LOG_LEVEL names a level, and `service.log_format`
    (json or text) for the handlers that write our lines, unless DUCTILE_LOG_FORMAT names one. A
    DUCTILE_LOG_LEVEL that names no level is said so in a line of its own rather than replaced
    unseen (an unknown DUCTILE_LOG_FORMAT too). Applied whenever a config is
    loaded or reloaded, and once Django has configured logging (gateway.apps), which sets its own."""
    global _unknown_said
    override = os.environ.get(LEVEL_ENV) or None
    unknown = override is not None and override.lower() not in _LEVELS
    gateway = logging.getLogger("ductile")
    gateway.setLevel(_LEVELS.get((level if unknown or override is None else override).lower(), logging.INFO))
    # Why wait for handlers: the first load of the config comes before logging is set up, and
    # the line would go to Python's last-resort handler, without the fields of ours.
    if unknown and override != _unknown_said and gateway.hasHandlers():
        _unknown_said = override
        # At ERROR, so that no configured level hides it: the operator asked for a level and got another.
        logger("config").error(
            "%s=%r is not a log level (%s); it is ignored and service.log_level %r applies",
            LEVEL_ENV,
            override,
            ", ".join(_LEVELS),
            level,
        )
    chosen = os.environ.get(FORMAT_ENV) or None
    if chosen is not None and chosen.lower() not in _FORMATTERS and chosen != _unknown_said and gateway.hasHandlers():
        _unknown_said = chosen
        logger("config").error(
            "%s=%r is not a log format (json, text); it is ignored and service.log_format %r applies",
            FORMAT_ENV,
            chosen,
            line_format,
        )
    if chosen is not None and chosen.lower() in _FORMATTERS:
        line_format = chosen.lower()
    formatter = _FORMATTERS.get(line_format, JsonFormatter)
    for handler in gateway.handlers:
        if type(handler.formatter) in _FORMATTERS.values() and type(handler.formatter) is not formatter:
            handler.setFormatter(formatter())


def logger(component: str) -> logging.Logger:
    return logging.getLogger(f"ductile.{component}")


def lean_records() -> None:
    """For a process whose every log line goes through `JsonFormatter` (`runworkers`): log records
    stop gathering what no line of ours shows, the caller's file and line (a walk up the stack),
    the thread's, the process's and multiprocessing's names. The worker logs a line per job; this
    is about 2 % of its throughput (docs/performance.md). Not for processes with other formatters:
    gunicorn's error log shows the process id."""
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
