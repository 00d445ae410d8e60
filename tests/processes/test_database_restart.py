"""A PostgreSQL server restarted under a running API (issue 33, item 7): every connection the API's
processes held is gone, and no request after it may fail because of that: neither the first write
of each process (its group-commit writer's connection) nor the first read of each request thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.live_api import live_api
from tests.support.outages import PgServer

pytestmark = pytest.mark.postgres

TOKEN = "tok-restart"
AT_ONCE = 16  # requests in flight together: they are spread over the API processes' threads


def test_the_first_writes_and_reads_after_a_postgresql_restart_are_answered(outage_db):
    server = PgServer.of(outage_db)
    with live_api(outage_db, [{"name": "t", "token": TOKEN, "scopes": ["*"]}]) as live:

        def post(n: int) -> tuple[int, dict]:
            return live.api.call("POST", "/plugin/echo/poll", {"payload": {"n": n}}, token=TOKEN)

        def read(job_id: str) -> tuple[int, dict]:
            return live.api.call("GET", f"/job/{job_id}", token=TOKEN)

        with ThreadPoolExecutor(AT_ONCE) as pool:
            # Every API process writes and many request threads read, so each holds connections.
            before = list(pool.map(post, range(AT_ONCE)))
            assert {code for code, _ in before} == {202}, before
            job_id = before[0][1]["job_id"]
            assert {code for code, _ in pool.map(read, [job_id] * AT_ONCE)} == {200}
            server.restart()
            writes = list(pool.map(post, range(100, 100 + AT_ONCE)))
            reads = list(pool.map(read, [job_id] * AT_ONCE))
        assert [code for code, _ in writes] == [202] * AT_ONCE, writes
        assert [code for code, _ in reads] == [200] * AT_ONCE, reads
        code, body = read(writes[0][1]["job_id"])
        assert code == 200 and body["status"] == "queued", body
