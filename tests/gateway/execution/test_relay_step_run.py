"""A `relay:` step whose instance cannot be reached fails its attempt and is retried by the
default policy (the sender owns the failure until the receiver's 202), with the reason in the
ledger; one whose projection names a missing path fails for good, naming it. Real worker loop,
in-process; the receiver side is tests/processes/test_relay.py."""

from __future__ import annotations

import re

import pytest
from django.http import HttpRequest
from django.test import Client
from django.urls import reverse

from gateway.operations.accounts import save_account
from ledger.models import Job
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.console_setup import console_roles
from tests.support.jobs import run_until_idle
from tests.support.network import free_port
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def relaying(config_dir, relay):
    config_dir.service["name"] = "home-primary"
    config_dir.extra["tokens"] = [{"name": "peer", "key": "k"}]
    config_dir.extra["instances"] = [
        {
            "name": "lab",
            "base_url": f"http://127.0.0.1:{free_port()}",  # nothing listens there
            "ingress_path": "/ingest/peer/home-primary",
            "secret_ref": "peer",
            "timeout": "2s",
        }
    ]
    config_dir.extra["pipelines"] = [{"name": "ship", "on": "backup.done", "steps": [{"id": "out", "relay": relay}]}]
    return load_runtime(config_dir)


def publish(holder, payload):
    from gateway.intake.events import publish_event

    (job_id,) = publish_event(holder.get(), "backup.done", payload, submitter=Submitter.CLI)
    return job_id


def test_an_unreachable_instance_fails_the_attempt_and_it_is_retried(config_dir):
    holder = relaying(config_dir, {"to": "lab", "event": "backup.ready"})
    job_id = publish(holder, {"archive": "a"})
    run_until_idle(holder)
    job = Job.objects.get(id=job_id)
    assert (job.plugin, job.status, job.attempt, job.max_attempts) == ("core.relay", JobStatus.QUEUED, 2, 4)
    error = job.last_error or ""
    assert error.startswith("core.relay: http://127.0.0.1:")
    assert "/ingest/peer/home-primary could not be reached" in error


def test_a_relay_jobs_page_in_the_console_tells_what_happened(config_dir):
    holder = relaying(config_dir, {"to": "lab", "event": "backup.ready"})
    job_id = publish(holder, {"archive": "a"})
    run_until_idle(holder)
    console_roles()
    save_account("ada", "auditor", "correct horse battery")
    client = Client()
    assert client.login(request=HttpRequest(), username="ada", password="correct horse battery")
    page = client.get(reverse("admin:ledger_job_change", args=[job_id]))
    assert page.status_code == 200
    shown = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.content.decode()))
    assert "core.relay" in shown and "ship:out" in shown and "could not be reached" in shown


def test_a_missing_projection_path_fails_for_good_naming_it(config_dir):
    holder = relaying(config_dir, {"to": "lab", "event": "backup.ready", "with": {"id": "payload.archive_id"}})
    job_id = publish(holder, {"archive": "a"})
    run_until_idle(holder)
    job = Job.objects.get(id=job_id)
    assert (job.status, job.attempt) == (JobStatus.FAILED, 1)
    assert (
        job.last_error
        == "core.relay: step 'out': with.id: {payload.archive_id} is missing (with: never substitutes null or \"\")"
    )
