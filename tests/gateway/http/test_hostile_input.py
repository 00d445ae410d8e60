"""Hostile input at every ingress gets a 4xx that says what was wrong, the same on SQLite and
PostgreSQL, and nothing is enqueued (issue "One front door for every job", defects 1 and 4)."""

from __future__ import annotations

import json
import os

import pytest
from django.test import Client, override_settings
from rest_framework.test import APIClient

from gateway.runtime import RUNTIME
from ledger.models import Job
from tests.support.runtime import installed_runtime
from tests.support.webhooks import ENV, HUB, sign, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

TOKEN = "tok-hostile"
BIG = 3 * 1024 * 1024  # past Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB)
DEEP = 600
# One endpoint that takes bodies past Django's own upload limit.
BIG_HOOK = f"""\
webhooks:
  endpoints:
    - name: big
      path: /webhook/big
      plugin: probe
      secret_ref: github_secret
      signature_header: X-Hub-Signature-256
      max_body_size: {BIG * 2}B
"""


def deep_json(levels: int) -> bytes:
    return ('{"payload": ' + '{"a": ' * levels + "1" + "}" * levels + "}").encode()


@pytest.fixture
def api(config_dir):
    config_dir.extra["api"] = {"auth": {"tokens": [{"name": "admin", "token": TOKEN, "scopes": ["*"]}]}}
    config_dir.extra["pipelines"] = [{"name": "flow", "on": "flow.start", "steps": [{"id": "a", "uses": "echo"}]}]
    with installed_runtime(config_dir):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        yield client


@pytest.fixture
def webhooks(config_dir):
    write_config(config_dir, BIG_HOOK)
    with (
        installed_runtime(config_dir, {**os.environ, **ENV}),
        override_settings(ROOT_URLCONF="gateway.http.webhooks.urls"),
    ):
        yield Client()


def hook(client: Client, body: bytes, content_type: str = "application/json"):
    return client.post("/webhook/big", data=body, content_type=content_type, headers={HUB: sign(body)})


@pytest.mark.parametrize("path", ["/plugin/echo/poll", "/pipeline/flow"])
def test_an_oversized_api_body_is_413_naming_the_limit(api, path):
    body = b'{"payload": {"blob": "' + b"x" * BIG + b'"}}'
    response = api.generic("POST", path, body, content_type="application/json")
    assert response.status_code == 413, response.content[:300]
    assert "larger than" in response.json()["error"]
    assert not Job.objects.exists()


def test_deeply_nested_json_is_a_400_at_the_api(api):
    response = api.generic("POST", "/plugin/echo/poll", deep_json(DEEP), content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert "nest" in response.json()["error"]
    assert not Job.objects.exists()


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded", "text/plain"])
def test_a_signed_webhook_past_djangos_own_limit_is_accepted_within_its_endpoints(webhooks, content_type):
    body = json.dumps({"blob": "x" * BIG}).encode()
    response = hook(webhooks, body, content_type)
    assert response.status_code == 202, response.content[:300]


def test_deeply_nested_json_in_a_signed_webhook_is_a_400(webhooks):
    response = hook(webhooks, deep_json(DEEP))
    assert response.status_code == 400, response.content[:300]
    assert "nest" in response.json()["error"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "body",
    [b'{"a": "\\udc00"}', b'{"\\ud800": 1}', b'{"a": ["ok", {"b": "x\\udfffy"}]}'],
)
def test_an_unpaired_surrogate_in_a_signed_webhook_is_a_400_on_both_backends(webhooks, body):
    response = hook(webhooks, body)
    assert response.status_code == 400, response.content[:300]
    assert "surrogate" in response.json()["error"]
    assert not Job.objects.exists()


def test_the_api_says_the_same_of_a_surrogate(api):
    body = b'{"payload": {"a": "\\udc00"}}'
    response = api.generic("POST", "/plugin/echo/poll", body, content_type="application/json")
    assert response.status_code == 400 and "surrogate" in response.json()["error"]
    assert RUNTIME.get() is not None
