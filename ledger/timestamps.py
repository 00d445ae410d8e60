"""How every time the gateway writes or shows is written: RFC 3339 in UTC with `Z`, as the spec's
examples have it (`2026-02-09T10:00:00Z`). One function, so that an event's `timestamp`, an API
field, a log line, a dedupe key and a backup manifest cannot drift apart.

The standard library only, nothing of ours: `gateway.logs`, which imports nothing else of the
project, uses it too (pyproject.toml's import-linter contracts say so).
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(moment: datetime, timespec: str = "auto") -> str:
    """`moment` in UTC with `Z`. `timespec` as `datetime.isoformat`'s: "auto" (microseconds when
    there are any: the API's and the events' stamps), "milliseconds" (log lines), "seconds" (the
    spec's examples, file headers, messages). A naive `moment` is taken as UTC, as the ledger
    stores it."""
    if moment.tzinfo is not UTC:  # Django's now() and the ledger's reads are UTC already
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.isoformat(timespec=timespec).removesuffix("+00:00") + "Z"
