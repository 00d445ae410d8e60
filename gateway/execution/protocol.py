"""Protocol v2 (spec 000 §6): building the request envelope and judging what came back.

Strict about meaning, lenient about form: stdout is one JSON document in any layout; unknown
top-level keys are ignored; `ok` needs `result` and `error` needs `error`; anything else is a
protocol error that fails the job with stderr and an excerpt of stdout kept (spec §11.4: "captured
for debugging"). A usable response is stored verbatim, however large; an unusable one only as its
first 64 KiB with a note of its size, so a hostile plugin cannot fill `job_log` 10 MiB at a time.
"""

from __future__ import annotations

import errno
import json
import re
import signal
from dataclasses import dataclass, field
from typing import Any

from gateway.execution.runner import STDERR_CAP, STDOUT_CAP, RunResult
from gateway.intake import DEDUPE_KEY_MAX
from gateway.version import PROTOCOL_VERSION
from ledger.models import EventRecord
from ledger.models.facts import STATE_SIZE_LIMIT
from ledger.storable import not_json
from pipelines.event_envelope import valid_event

# What the ledger stores of an event: a longer type or dedupe key is refused by PostgreSQL's
# columns (and would fail the whole completion), and kept whole by SQLite's; either way the
# plugin is told, and the rest of its answer counts.
EVENT_TYPE_MAX = int(EventRecord._meta.get_field("type").max_length or 200)

EX_CONFIG = 78
# Deeper responses are refused. Why a bound well below Python's recursion limit: the response is
# parsed again wherever it is read (job logs, the API, routed event payloads in JSONField columns),
# on stacks already deeper than this worker's; a document that only just parses here would raise
# RecursionError there.
MAX_DEPTH = 256
# `\u0000` or a `\uD800`-`\uDFFF` escape: the only ways JSON text carries a NUL or an unpaired
# surrogate, which PostgreSQL refuses in text and jsonb (and so, for the same answer on both
# backends, we refuse everywhere).
_RISKY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89abcdefABCDEF])")
EXCERPT_CAP = 64 * 1024
_SURROGATE = re.compile("[\ud800-\udfff]")
_PERMANENT_SPAWN_ERRORS = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.EISDIR, errno.ENOTDIR}
# Made once: `json.loads` and `json.dumps` with any option build a decoder or an encoder per call,
# and these run for every job.
_RESPONSE_DECODER = json.JSONDecoder(parse_constant=not_json)
_REQUEST_ENCODER = json.JSONEncoder(separators=(",", ":"))


@dataclass
class Verdict:
    status: str  # succeeded | failed | timed_out
    error: str | None = None
    retryable: bool = True
    response_text: str | None = None
    result: Any = None
    events: list[dict[str, Any]] = field(default_factory=list)
    state_updates: dict[str, Any] | None = None
    subs: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def stopwatch_status(self) -> str:
        return {"succeeded": "ok", "timed_out": "timeout"}.get(self.status, "err")


def build_request(
    *,
    job_id: str,
    command: str,
    config: dict[str, Any],
    state: dict[str, Any],
    context: dict[str, Any],
    event: dict[str, Any],
    deadline_at: str,
    instance: str,
) -> bytes:
    """`config`, `state` and `context` are always objects, never null: real plugins crash on null."""
    return _REQUEST_ENCODER.encode(
        {
            "protocol": PROTOCOL_VERSION,
            "job_id": job_id,
            "command": command,
            "config": config or {},
            "state": state or {},
            "context": context or {},
            "event": event or {},
            "deadline_at": deadline_at,
            "instance": instance,
        }
    ).encode()


def judge(run: RunResult, *, timeout: float, max_subs: int) -> Verdict:
    """What the attempt came to. Never raises: a response that cannot be judged fails the attempt
    as a protocol error, retried like any failure but exit 78 and `retry: false` (spec §5.7), so
    the job never stays `running` behind an exception."""
    try:
        return _judge(run, timeout=timeout, max_subs=max_subs)
    except Exception as exc:  # whatever the plugin sent, the attempt must end
        return Verdict(
            "failed",
            f"protocol error: the response could not be judged ({type(exc).__name__}: {exc})",
            response_text=excerpt(run.stdout),
        )


def shown(raw: bytes) -> str:
    """Plugin output as text every backend stores: undecodable bytes and NULs as `\\xNN`."""
    return raw.decode("utf-8", errors="backslashreplace").replace("\x00", "\\x00")


def stored_stderr(raw: bytes, warnings: list[str]) -> str:
    """What `job_log.stderr` keeps: the plugin's stderr, `shown`, then the gateway's notes (an
    escape, a dropped event, why it was cut), all within the 64 KiB cap of spec §11.4: the notes
    are kept whole and the plugin's text gives way to them."""
    notes = "".join(f"\n[ductile] warning: {w}" for w in warnings)
    text = shown(raw) + notes
    # The first test spares the encoding of the usual few lines: UTF-8 is at most 4 bytes a character.
    if len(text) * 4 <= STDERR_CAP or len(text.encode()) <= STDERR_CAP:
        return text
    room = max(STDERR_CAP - len(notes.encode()), 0)
    return (shown(raw).encode()[:room] + notes.encode())[:STDERR_CAP].decode(errors="ignore")


def excerpt(raw: bytes, *, cut_short: bool = False) -> str | None:
    """What is kept of stdout that is not a usable response: its head, `shown`, and its real size
    (`cut_short`: the plugin was stopped at the cap and wrote more than `raw`)."""
    if not raw:
        return None
    text = shown(raw[:EXCERPT_CAP])
    if len(raw) > EXCERPT_CAP:
        size = f"more than {len(raw)}" if cut_short else str(len(raw))
        text += f"\n[ductile: stdout was {size} bytes; only the first {EXCERPT_CAP} are kept]"
    return text


def _judge(run: RunResult, *, timeout: float, max_subs: int) -> Verdict:
    kept = excerpt(run.stdout, cut_short=run.stdout_overflow)
    warnings = list(run.warnings)
    if run.spawn_error:
        retryable = run.spawn_errno not in _PERMANENT_SPAWN_ERRORS
        return Verdict("failed", run.spawn_error, retryable=retryable, warnings=warnings)
    if run.stderr_truncated:
        warnings.append(f"stderr exceeded {STDERR_CAP // 1024} KiB and was truncated")
    if run.timed_out:
        return Verdict(
            "timed_out",
            f"timed out after {timeout:g}s: SIGTERM to the process group, SIGKILL after the grace period",
            response_text=kept,
            warnings=warnings,
        )
    if run.stdout_overflow:
        return Verdict(
            "failed",
            f"stdout exceeded the {STDOUT_CAP // (1024 * 1024)} MiB cap; the plugin was stopped",
            response_text=kept,
            warnings=warnings,
        )
    permanent = run.exit_code == EX_CONFIG
    exit_note = f" ({exit_words(run.exit_code)})"
    try:
        stdout_text = run.stdout.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem: str | None = f"stdout is not valid UTF-8 (byte 0x{run.stdout[exc.start]:02x} at offset {exc.start})"
    else:
        response, problem = _parse(stdout_text)
    if problem is not None:
        return Verdict(
            "failed",
            f"protocol error: {problem}{exit_note}",
            retryable=not permanent,
            response_text=kept,
            warnings=warnings,
        )
    assert response is not None
    kept = stdout_text  # a usable response: kept verbatim
    if response["status"] == "error":
        retry_flag = response.get("retry", True) is not False
        return Verdict(
            "failed",
            str(response["error"]),
            retryable=retry_flag and not permanent,
            response_text=kept,
            warnings=warnings,
            subs=_subs(response, max_subs, warnings),
        )
    if permanent:
        return Verdict(
            "failed",
            f"plugin exited {EX_CONFIG} (EX_CONFIG): permanent configuration failure",
            retryable=False,
            response_text=kept,
            warnings=warnings,
        )
    if run.exit_code:
        ended = f"was {exit_words(run.exit_code)}" if run.exit_code < 0 else f"exited {run.exit_code}"
        warnings.append(f"plugin answered ok but {ended}")
    events = []
    for index, raw in enumerate(response.get("events") or []):
        reason = valid_event(raw) or _unstorable_event(raw)
        if reason:
            warnings.append(f"events[{index}] dropped: {reason}")
        else:
            events.append(raw)
    state_updates = response.get("state_updates")
    if state_updates is not None and not isinstance(state_updates, dict):
        warnings.append("state_updates is not an object and was ignored")
        state_updates = None
    if state_updates is not None and len(json.dumps(state_updates)) > STATE_SIZE_LIMIT:
        return Verdict(
            "failed",
            "state_updates snapshot exceeds the 1 MB limit; the update was rejected",
            retryable=False,
            response_text=kept,
            warnings=warnings,
        )
    return Verdict(
        "succeeded",
        response_text=kept,
        result=response.get("result"),
        events=events,
        state_updates=state_updates,
        subs=_subs(response, max_subs, warnings),
        warnings=warnings,
    )


def exit_words(code: int | None) -> str:
    """How a plugin process ended, as an operator reads it: `exit code 3`, `killed by SIGSEGV`."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _unstorable_event(event: dict[str, Any]) -> str | None:
    if len(event["type"]) > EVENT_TYPE_MAX:
        return f"its type is longer than {EVENT_TYPE_MAX} characters ({len(event['type'])})"
    key = event.get("dedupe_key")
    if key and len(str(key)) > DEDUPE_KEY_MAX:
        return f"its dedupe_key is longer than {DEDUPE_KEY_MAX} characters ({len(str(key))})"
    return None


def _parse(text: str) -> tuple[dict[str, Any] | None, str | None]:
    if not text.strip():
        return None, "plugin wrote nothing to stdout"
    try:
        response = _RESPONSE_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        return None, f"stdout is not one JSON document: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        return None, f"the response nests deeper than {MAX_DEPTH} levels"
    except ValueError as exc:
        return None, str(exc)
    if _nests_deeper(text, response, MAX_DEPTH):
        return None, f"the response nests deeper than {MAX_DEPTH} levels"
    if _RISKY_ESCAPE.search(text) and not _storable(response):
        return None, "strings in the response must not contain NUL characters or unpaired surrogates"
    if not isinstance(response, dict):
        return None, f"response must be a JSON object, got {type(response).__name__}"
    status = response.get("status")
    if status == "ok":
        if "result" not in response:
            return None, "status ok needs a `result`"
    elif status == "error":
        if "error" not in response:
            return None, "status error needs an `error`"
    else:
        return None, f"unknown status {status!r} (expected ok or error)"
    return response, None


def _storable(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node or _SURROGATE.search(node):
                return False
        elif isinstance(node, dict):
            stack.extend(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return True


def _nests_deeper(text: str, value: Any, limit: int) -> bool:
    # A document nests no deeper than it has brackets (str.count runs in C): almost every response
    # is decided here, without a walk.
    if text.count("[") + text.count("{") <= limit:
        return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _subs(response: dict[str, Any], max_subs: int, warnings: list[str]) -> list[dict[str, Any]]:
    """Plugin sub-spans: malformed entries dropped silently, the head kept up to the cap."""
    raw = response.get("ductile_stopwatch_subs")
    if not isinstance(raw, list):
        return []
    subs = [
        s for s in raw if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("dur_ns"), int)
    ]
    if len(subs) > max_subs:
        warnings.append(f"{len(subs)} stopwatch sub-spans; kept the first {max_subs}")
    return subs[:max_subs]
