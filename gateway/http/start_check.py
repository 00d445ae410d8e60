"""gunicorn's start-up check (ductile_site/gunicorn.py runs it in a child of its master, before
any worker): the ledger's integrity where Django is not set up, then the static files."""

from __future__ import annotations

import os
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

from gateway.bootstrap import prepare_process
from gateway.http.static_collection import collect_if_needed


def ledger_refusal() -> str | None:
    """The start-up integrity check where Django is not set up (gunicorn's master, before it forks
    the API's or the webhook listener's workers: `ductile_site/gunicorn.py`), on the SQLite file
    `prepare_process` chose; why the process must not start, or None. Nothing to check on
    PostgreSQL, for a config that did not load, before the file exists, or on a file the starting
    `system start` checked as it is now (`gateway.storage.database.CHECKED_ENV`)."""
    path = os.environ.get("DUCTILE_DB_PATH")
    if os.environ.get("DATABASE_URL") or not path or not Path(path).is_file():
        return None
    # Not at import: it loads Django's database and migration modules, ~70 ms of the check on
    # PostgreSQL or before the file exists, where nothing is checked.
    from gateway.storage.database import START_CHECK, checked_by_the_starter, corrupted, integrity_finding

    if checked_by_the_starter(path):
        return None

    with closing(sqlite3.connect(path)) as db:
        finding = integrity_finding(db, START_CHECK)
    return corrupted(f"sqlite:{path}", finding) if finding else None


def start_check() -> None:
    """Exit 1 with the finding on stderr when the ledger must not be served; then the static files
    are collected if set-up did not."""
    prepare_process(config_dir=None)
    refusal = ledger_refusal()
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        sys.exit(1)
    collect_if_needed()
