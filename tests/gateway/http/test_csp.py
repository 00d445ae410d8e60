"""The Content-Security-Policy of every page a person is served (gateway/http/csp.py): the console,
the dashboard, /docs and the landing page's stricter own; none for JSON. In Chromium, every page
that runs a script (the console's, the dashboard's live views and Mermaid diagrams, Swagger UI)
works under it (the `browser` fixture fails a test whose pages the policy broke), and a script
that text smuggled into a console page would run is refused. Before: only `/` had a policy."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.test import Client

from gateway.http.csp import POLICY
from ledger.models import Job
from tests.support.browser import Page, csp_violations, served_in_process
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import run_job
from tests.support.runtime import installed_runtime
from tests.support.waiting import wait_for

# Real commits: the live server answers the browser from a thread of its own, on its own connection.
pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery"
TOKEN = "tok-admin"
# A <script> element with a body: the kind the policy refuses (one with `src` loads from the origin;
# a JSON data block is never run).
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>\s*\S", re.IGNORECASE)


@pytest.fixture
def site(config_dir: ConfigDir) -> Iterator[str]:
    config_dir.extra["pipelines"] = [{"name": "greet", "on": "greet.start", "steps": [{"id": "hello", "uses": "echo"}]}]
    config_dir.extra["api"] = {
        "enabled": True,
        "auth": {"tokens": [{"name": "admin", "token": TOKEN, "scopes": ["*"]}]},
    }
    with installed_runtime(config_dir) as holder:
        job = run_job(holder, "echo", payload={"message": "hi"})
        User.objects.create_superuser("root", password=PASSWORD)
        yield job.id


@pytest.fixture
def person(site: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username="root"))
    return client


def pages(job_id: str) -> list[str]:
    return [
        "/admin/",
        "/admin/ledger/job/",
        f"/admin/ledger/job/{job_id}/change/",
        "/admin/ledger/joblog/",
        "/dashboard/",
        "/dashboard/pipelines/",
        "/docs",
    ]


def test_every_page_carries_the_policy_and_no_inline_script(site: str, person: Client) -> None:
    anonymous = Client()
    for client, path in [*((person, path) for path in pages(site)), (anonymous, "/admin/login/")]:
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.status_code)
        assert answer["Content-Type"].startswith("text/html"), path
        assert answer["Content-Security-Policy"] == POLICY, path
        assert not INLINE_SCRIPT.search(answer.content.decode()), f"{path} has an inline script"
    # The landing page keeps its own, stricter one (no inline style at all).
    landing = person.get("/", headers={"accept": "text/html"})
    assert "style-src 'self';" in landing["Content-Security-Policy"]
    # Swagger UI's start-up script comes from /docs itself, naming the schema.
    script = person.get("/docs?script=")
    assert script["Content-Type"].startswith("application/javascript") and "/openapi.json" in script.content.decode()


def test_json_answers_carry_no_policy(site: str) -> None:
    client = Client()
    for path in ("/healthz", "/plugins", "/", "/jobs"):
        answer = client.get(path, headers={"authorization": f"Bearer {TOKEN}"})
        assert answer["Content-Type"].startswith("application/json"), path
        assert "Content-Security-Policy" not in answer, path


def test_in_chromium_every_page_works_under_the_policy_and_an_inline_script_is_refused(
    site: str, browser: Page
) -> None:
    with served_in_process() as base:
        browser.base = base
        browser.log_in("root", PASSWORD)
        for path in pages(site):
            browser.open(path)
            assert not csp_violations(browser), path
        # The scripts ran: the dashboard drew its diagram, Swagger UI listed the operations.
        browser.open("/dashboard/pipelines/")
        wait_for(lambda: browser.driver.execute_script("return window.ductilePipelines.ready"), 20, what="mermaid")
        assert browser.find_all("svg g.node[data-step]")
        browser.open("/docs")
        wait_for(lambda: browser.find_all(".opblock"), 20, what="Swagger UI's operations")
        browser.screenshot("csp-docs")
        # What an injected <script> would do on a console page: refused, and said so.
        browser.open(f"/admin/ledger/job/{site}/change/")
        browser.driver.execute_script(
            "const s = document.createElement('script'); s.textContent = 'window.smuggled = 1';"
            "document.body.appendChild(s);"
        )
        assert browser.driver.execute_script("return window.smuggled") is None
        refused = csp_violations(browser)
        assert refused and "inline script" in refused[0], refused
    assert Job.objects.filter(pk=site).exists()
