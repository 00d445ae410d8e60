"""A synchronous pipeline call met by a database outage after its root job was recorded (issue 33,
item 8). The answer must never be 503 "nothing was recorded": a client that obeys it runs the
pipeline twice. The wait rides out a blip shorter than the caller's timeout and answers with the
result; past the timeout it answers 202 with the job ids to follow. Real outages: the PostgreSQL
server stopped (its reads fail), with a real `system start` tree running the pipeline."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.live_api import live_api
from tests.support.outages import PgServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres

TOKEN = "tok-sync"


def call_through_an_outage(cfg, marker: Path, *, timeout: str, outage: float) -> tuple[int, dict, str]:
    """POST /pipeline/nap (a stress step of 2 s) and stop the server for `outage` seconds once the
    step runs; the answer, and what the gateway said."""
    server = PgServer.of(cfg)
    cfg.service["lease_ttl"] = "30s"
    cfg.extra["pipelines"] = [
        {
            "name": "nap",
            "on": "nap.start",
            "execution_mode": "synchronous",
            "timeout": timeout,
            "steps": [{"id": "nap", "uses": "stress", "with": {"sleep": 2, "marker_dir": str(marker)}}],
        }
    ]
    answers: list[tuple[int, dict]] = []
    with live_api(cfg, [{"name": "t", "token": TOKEN, "scopes": ["*"]}], workers=True) as live:
        caller = threading.Thread(
            target=lambda: answers.append(live.api.call("POST", "/pipeline/nap", {}, token=TOKEN))
        )
        caller.start()
        wait_for(
            lambda: list(marker.glob("*.start")), timeout=30, what="the step to run", explain=lambda: live.output.text
        )
        with server.stopped(outage):
            pass
        caller.join(timeout=90)
        assert answers, "no answer"
        code, body = answers[0]
        if code == 202:  # the job must still finish, once, after the outage
            wait_for(
                lambda: live.api.call("GET", f"/job/{body['job_id']}", token=TOKEN)[1].get("status") == "succeeded",
                timeout=60,
                what="the pipeline's job to succeed",
                explain=lambda: live.output.text,
            )
        return code, body, live.output.text


def test_a_blip_shorter_than_the_timeout_is_ridden_out_and_answered_with_the_result(outage_db, tmp_path):
    code, body, text = call_through_an_outage(outage_db, tmp_path, timeout="60s", outage=4.0)
    assert code == 200, (body, text)
    assert body["status"] == "succeeded" and body["result"]["result"] == "ok after 2s", body
    assert len(list(tmp_path.glob("*.start"))) == 1


def test_an_outage_past_the_timeout_answers_202_with_the_jobs_to_follow(outage_db, tmp_path):
    code, body, text = call_through_an_outage(outage_db, tmp_path, timeout="3s", outage=8.0)
    assert code == 202, (body, text)
    assert body["job_id"] and body["job_ids"] == [body["job_id"]] and body["timeout_exceeded"] is True, body
    assert "could not be read" in body["message"] and f"/job/{body['job_id']}" in body["message"], body
    assert "nothing was recorded" not in str(body)
    assert len(list(tmp_path.glob("*.start"))) == 1
