"""Waiting on a condition (a ledger row, a process's output) with a deadline that names what it
waited for."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    predicate: Any,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
    explain: Callable[[], str] | None = None,
) -> Any:
    """`predicate()`'s first truthy value; on timeout an AssertionError naming `what`, with the end
    of what `explain()` returns then (a process's output so far), so the failure can be read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    message = f"timed out after {timeout}s waiting for {what}"
    raise AssertionError(f"{message}; meanwhile:\n{explain()[-4000:]}" if explain else message)
