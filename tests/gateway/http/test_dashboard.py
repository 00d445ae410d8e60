"""The dashboard's pages and streams in-process (the browser tests drive them for real): who may
see them (the console's session, any role that reads the ledger), what the pages carry for their
scripts, and what the streams send: a snapshot, then new events and new snapshots as the ledger
moves, each part only when it changed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from gateway.execution.dispatch import Executor
from gateway.intake.events import publish_event
from ledger.models import EventRecord, Job, JobSpec
from ledger.submitters import Submitter
from tests.support.runtime import load_runtime

# Real commits: the live server answers from a thread of its own, on its own connection.
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_live_state"),
]

PASSWORD = "correct horse battery"


@pytest.fixture
def holder(config_dir):
    config_dir.extra["pipelines"] = [
        {
            "name": "greet",
            "on": "greet.start",
            "steps": [
                {"id": "hello", "uses": "echo"},
                {"id": "look", "uses": "probe", "if": {"path": "payload.go", "op": "eq", "value": True}},
            ],
        }
    ]
    return load_runtime(config_dir)


@pytest.fixture
def auditor(holder) -> Client:
    """A person who may read the ledger. (The role groups come from a migration, which these
    flushed databases lose; the browser tests log in with a real `--role auditor` account.)"""
    user = User.objects.create_user("ada", password=PASSWORD, is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="ledger", codename="view_job"))
    client = Client()
    client.force_login(user)
    return client


def frames(response, count: int) -> list[tuple[str, Any]]:
    """The next `count` named messages of an SSE response, as (event name, parsed data)."""
    found: list[tuple[str, Any]] = []
    chunks = iter(response.streaming_content)
    while len(found) < count:
        chunk = next(chunks).decode()
        if chunk.startswith(":"):
            continue
        name = chunk.split("\n", 1)[0].removeprefix("event: ")
        data = chunk.split("data: ", 1)[1].rstrip("\n")
        found.append((name, json.loads(data)))
    return found


def test_the_pages_need_a_login_with_a_role_that_reads_the_ledger(holder):
    anonymous = Client()
    for path in ("/dashboard/", "/dashboard/pipelines/"):
        answer = anonymous.get(path)
        assert answer.status_code == 302 and answer["Location"] == f"/admin/login/?next={path}"
    # Staff without a role may log in to the admin but may not read the ledger: back to the login.
    User.objects.create_user("nobody", password=PASSWORD, is_staff=True)
    roleless = Client()
    roleless.force_login(User.objects.get(username="nobody"))
    assert roleless.get("/dashboard/").status_code == 302
    refused = anonymous.get("/dashboard/stream?view=overview")
    assert refused.status_code == 403 and "log in" in refused.json()["error"]
    assert roleless.get("/dashboard/stream").status_code == 403


def test_an_auditor_sees_the_dashboard_and_the_console_links_to_it(auditor):
    page = auditor.get("/dashboard/")
    assert page.status_code == 200
    html = page.content.decode()
    config = json.loads(html.split('id="dash-config" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert config["stream"] == "/dashboard/stream?view=overview"
    assert config["jobUrl"].replace(config["jobIdPlaceholder"], "J") == "/admin/ledger/job/J/change/"
    assert 'href="/admin/"' in html  # back to the audit console
    assert "/static/vendor/uplot-1.6.32/uPlot.iife.min." in html
    assert "/static/vendor/mermaid" not in html  # 5 MB: on the pipelines page only
    console = auditor.get("/admin/").content.decode()
    assert 'href="/dashboard/">Live dashboard</a>' in console


def test_the_pipelines_page_carries_each_diagram_and_its_steps(auditor):
    html = auditor.get("/dashboard/pipelines/").content.decode()
    assert 'data-pipeline="greet"' in html
    assert "flowchart TD" in html and "n_look__switch" in html
    nodes = json.loads(html.split('id="nodes-0" type="application/json">', 1)[1].split("</script>", 1)[0])
    # In flow order, with the Mermaid id the script colours and the label the table shows.
    assert nodes == [
        ["hello", "n_hello", "hello"],
        ["look__switch", "n_look__switch", "if: look"],
        ["look", "n_look", "look"],
    ]
    assert "/static/vendor/mermaid-12.3.0/mermaid.min." in html


def test_the_overview_stream_sends_a_snapshot_then_what_changes(auditor, holder):
    response = auditor.get("/dashboard/stream?view=overview")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    try:
        ((name, snapshot),) = frames(response, 1)
        assert name == "snapshot" and snapshot["queue"]["queued"] == 0
        job_id = Job.objects.enqueue(
            JobSpec(plugin="echo", command="poll", submitter=Submitter.CLI), default_dedupe_ttl=60
        ).job_id
        ((name, snapshot),) = frames(response, 1)
        assert name == "snapshot" and snapshot["queue"]["queued"] == 1
        job = Job.objects.claim_next(worker_id="w1", caps={"echo": 1}, lease_ttl=60)
        assert job is not None
        Executor(holder, "w1").execute(job)
        got = dict(frames(response, 2))  # the new events and the new figures, in one wake-up
        assert {e["job_id"] for e in got["events"]} == {job_id} and "payload" not in got["events"][0]
        assert got["snapshot"]["queue"]["succeeded"] == 1
    finally:
        response.close()


def test_the_pipelines_stream_sends_runs_and_the_steps_of_each_pipelines_latest_or_chosen_run(auditor, holder):
    first = publish_event(holder.get(), "greet.start", {"go": True}, submitter=Submitter.CLI)[0]
    second = publish_event(holder.get(), "greet.start", {"go": False}, submitter=Submitter.CLI)[0]
    latest = auditor.get("/dashboard/stream?view=pipelines")
    chosen = auditor.get(f"/dashboard/stream?view=pipelines&run={first}")
    try:
        got = dict(frames(latest, 2))
        assert [r["job_id"] for r in got["runs"]["greet"]] == [second, first]
        assert got["steps"]["greet"]["job_id"] == second and got["steps"]["greet"]["status"] == "queued"
        got = dict(frames(chosen, 2))
        assert got["steps"]["greet"]["job_id"] == first
        job = Job.objects.claim_next(worker_id="w1", caps=holder.get().claim_caps(), lease_ttl=60)
        assert job is not None and job.id == first
        Executor(holder, "w1").execute(job)
        # The chosen run moved; the list of runs changed too (its status): both are sent again.
        got = dict(frames(chosen, 2))
        assert got["steps"]["greet"]["steps"]["hello"]["status"] == "succeeded"
    finally:
        latest.close()
        chosen.close()


def test_an_unknown_view_is_a_clear_400(auditor):
    answer = auditor.get("/dashboard/stream?view=nope")
    assert answer.status_code == 400 and "overview or pipelines" in answer.json()["error"]


def test_events_are_batched_and_capped_per_message(auditor, holder):
    from django.utils import timezone

    from gateway.http.dashboard.stream import MAX_EVENTS_PER_FRAME

    response = auditor.get("/dashboard/stream?view=overview")
    try:
        frames(response, 1)
        EventRecord.record(
            [{"type": f"burst.{i}"} for i in range(MAX_EVENTS_PER_FRAME + 20)], job_id=None, now=timezone.now()
        )
        got = dict(frames(response, 2))
        assert [e["type"] for e in got["events"]][-1] == f"burst.{MAX_EVENTS_PER_FRAME + 19}"
        assert len(got["events"]) == MAX_EVENTS_PER_FRAME  # the newest ones: the page lists a dozen
    finally:
        response.close()
