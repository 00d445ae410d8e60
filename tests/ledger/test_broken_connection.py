"""A database connection that breaks mid-run: the hand-written statements of the hot path
(ledger/sql.py) raise Django's own error classes, so the code that catches
`django.db.DatabaseError` sees them, and `close_old_connections` replaces the broken connection
(issue "One front door for every job", defect 2)."""

from __future__ import annotations

import os

import psycopg
import pytest
from django.db import DatabaseError, close_old_connections, connection

from ledger import sql
from ledger.models import Job, JobSpec
from ledger.submitters import Submitter

pytestmark = pytest.mark.postgres


def claim() -> Job | None:
    return Job.objects.claim_next(worker_id="w1", caps={"echo": 1}, lease_ttl=60)


@pytest.mark.django_db(transaction=True)
def test_a_statement_on_a_broken_connection_raises_djangos_error_and_the_connection_is_replaced():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: its server ends the backend; SQLite has no server to end a connection")
    Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=60)
    connection.ensure_connection()
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
    with pytest.raises(DatabaseError) as raised:
        sql.fetch_value("SELECT COUNT(*) FROM job_queue", [])
    assert type(raised.value).__module__ == "django.db.utils", type(raised.value)
    # Django's check of a connection that failed: unusable, so it is replaced.
    close_old_connections()
    assert claim() is not None


@pytest.mark.django_db(transaction=True)
def test_a_failing_statement_raises_djangos_error_on_every_backend():
    with pytest.raises(DatabaseError) as raised:
        sql.fetch_value("SELECT COUNT(*) FROM no_such_table", [])
    assert type(raised.value).__module__ == "django.db.utils", type(raised.value)
    assert connection.errors_occurred
