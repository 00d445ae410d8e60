"""The readers of the finished-jobs index (`job_queue_finished_idx`, partial: `completed_at IS NOT
NULL`) really read it on SQLite. SQLite uses a partial index only for a query whose conditions
imply the index's own, so a reader that loses its `completed_at` condition falls back to reading
every row of job_queue: the retention pass, the live views' latest failures and throughput, and
`system selfcheck` would then slow down with the size of the ledger, unseen. The claim reads
the queued jobs' index in its own order (`job_queue_claim_idx`), and the readers of running jobs
read the `running` range of (status, created_at), the index that replaced a partial one of their
own (migration 0010). `job logs` by a problem status reads job_log's partial index of problem
attempts (migration 0018), whose condition find_logs states for the same reason."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gateway.reports.live import latest_failures, throughput
from ledger import sql
from ledger.models import Job

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif("connection.vendor != 'sqlite'"),
]

INDEX = "job_queue_finished_idx"


def plans_of(run: Callable[[], object], table: str = "job_queue") -> list[str]:
    """The query plan of every read of `table` that `run()` makes, as SQLite describes it."""
    with CaptureQueriesContext(connection) as captured:
        run()
    plans = []
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            if f'"{table}"' not in query["sql"]:
                continue
            cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            plans.append(" ; ".join(str(row[-1]) for row in cursor.fetchall()))
    assert plans, f"no {table} query was made"
    return plans


def test_the_retention_pass_reads_expired_jobs_through_the_finished_jobs_index():
    expired = Job.objects.expired(timezone.now() - timedelta(days=1))
    for plan in plans_of(lambda: list(expired.order_by().values_list("pk", flat=True)[:500])):
        assert INDEX in plan, plan


def test_the_live_views_read_failures_and_throughput_through_the_finished_jobs_index():
    for plan in plans_of(latest_failures) + plans_of(lambda: throughput(timezone.now())):
        assert INDEX in plan, plan


def test_the_claim_takes_the_oldest_queued_job_in_the_claim_index_order_without_sorting():
    """Not (status, created_at) and a sort of every queued job of the oldest created_at by id: the
    jobs of one batch share it, and 3,000 of them cost each claim ~10 times its CPU
    (docs/performance-history.md, item 43)."""
    connection.ensure_connection()
    now = timezone.now()
    params = ["w1", now, now, "echo", now]
    rows = connection.connection.execute("EXPLAIN QUERY PLAN " + sql.claim(1, False, "sqlite", "id"), params)
    plan = " ; ".join(str(row[-1]) for row in rows.fetchall())
    assert "job_queue_claim_idx" in plan and "TEMP B-TREE" not in plan, plan


def test_the_readers_of_running_jobs_read_the_running_range_of_status_and_created_at():
    """A claim's per-plugin running counts, the recovery pass's probe and its lost-job scan run at
    every claim or pass: without an index they would read every row of the ledger."""
    connection.ensure_connection()
    for text, params in ((sql.running_counts("sqlite"), ["w1"]), (sql.ANY_RUNNING, [])):
        rows = connection.connection.execute("EXPLAIN QUERY PLAN " + text, params)
        plan = " ; ".join(str(row[-1]) for row in rows.fetchall())
        assert "job_queue_status_created_idx (status=?)" in plan, plan
    for plan in plans_of(lambda: list(Job.objects.lost(now=timezone.now()))):
        assert "job_queue_status_created_idx (status=?" in plan, plan


def test_job_logs_by_a_problem_status_reads_the_partial_index_for_its_page_and_its_total():
    """`job logs --status failed [--plugin P]`: without job_log_problem_idx its total counted every
    row of the plugin (or of the table), each read from the table: seconds on a ledger of 10 M jobs
    (bench_ledger_scale.py). The page and the count both read the index, with or without a plugin."""
    from gateway.reports import find_logs

    cases: list[dict[str, str | None]] = [
        {"status": "failed"},
        {"status": "failed", "plugin": "echo"},
        {"status": "timed_out"},
    ]
    for filters in cases:
        plans = plans_of(functools.partial(find_logs, filters), table="job_log")
        assert len(plans) == 2, plans  # the page and the total
        for plan in plans:
            assert "job_log_problem_idx" in plan, (filters, plan)
