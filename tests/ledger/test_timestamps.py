"""ledger.timestamps.rfc3339: the one way a time is written (RFC 3339, UTC, `Z`), and no module
that writes one by hand beside it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from ledger.timestamps import rfc3339

ROOT = Path(__file__).resolve().parents[2]
MOMENT = datetime(2026, 2, 9, 10, 0, 5, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    ("timespec", "written"),
    [
        ("auto", "2026-02-09T10:00:05.123456Z"),  # an event's timestamp, an API field
        ("milliseconds", "2026-02-09T10:00:05.123Z"),  # a log line
        ("seconds", "2026-02-09T10:00:05Z"),  # the spec's examples, a catch-up dedupe key
    ],
)
def test_each_precision_is_utc_with_z(timespec: str, written: str) -> None:
    assert rfc3339(MOMENT, timespec) == written


def test_a_whole_second_has_no_fraction_and_other_zones_are_shown_in_utc() -> None:
    assert rfc3339(MOMENT.replace(microsecond=0)) == "2026-02-09T10:00:05Z"
    sydney = MOMENT.astimezone(timezone(timedelta(hours=11)))
    assert rfc3339(sydney, "seconds") == "2026-02-09T10:00:05Z"
    assert rfc3339(MOMENT.replace(tzinfo=None), "seconds") == "2026-02-09T10:00:05Z"  # the ledger's UTC


# What writing the stamp by hand looks like: strftime/format codes, or `isoformat()`'s offset swapped.
BY_HAND = re.compile(r"%Y-%m-%dT%H:%M:%S|\+00:00\"\)? *(?:\+|, *)\"Z\"|removesuffix\(\"\+00:00\"\)")


def test_no_module_writes_the_stamp_by_hand() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("ductile_site", "gateway", "ledger", "pipelines")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "ledger" / "timestamps.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BY_HAND.search(line)
    ]
    assert found == [], f"use ledger.timestamps.rfc3339: {found}"
