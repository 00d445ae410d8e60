"""The Django admin is a read-only audit console over every ledger table."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from ledger.models import Job, JobSpec

pytestmark = pytest.mark.django_db

MODELS = [
    "job",
    "jobtransition",
    "joblog",
    "eventcontext",
    "pluginfact",
    "pluginstate",
    "jobstopwatch",
    "workerinstance",
    "plugininstancerecord",
]


@pytest.fixture
def admin_client(client):
    User.objects.create_superuser("auditor", "a@example.com", "pw")
    client.login(username="auditor", password="pw")
    return client


@pytest.mark.parametrize("model", MODELS)
def test_every_ledger_table_is_browsable(admin_client, model):
    Job.objects.enqueue(JobSpec("echo", "poll", "cli", payload={"x": 1}), default_dedupe_ttl=60)
    response = admin_client.get(reverse(f"admin:ledger_{model}_changelist"))
    assert response.status_code == 200


@pytest.mark.parametrize("model", MODELS)
def test_nothing_can_be_added_or_changed(admin_client, model):
    assert admin_client.get(reverse(f"admin:ledger_{model}_add")).status_code == 403


def test_a_job_can_be_read_but_not_deleted(admin_client):
    job_id = Job.objects.enqueue(JobSpec("echo", "poll", "cli"), default_dedupe_ttl=60).job_id
    assert admin_client.get(reverse("admin:ledger_job_change", args=[job_id])).status_code == 200
    assert admin_client.post(reverse("admin:ledger_job_delete", args=[job_id]), {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job_id).exists()
