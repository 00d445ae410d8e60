"""The relay ingress at a `remote_ingress.listen_path` of the operator's choosing (served through
the URLconf's last route): a signed POST there is accepted; the default path, another path and
another method are the API's 404 or 405, and a gateway without `remote_ingress` has no ingress at
all. A peer rotating its key is accepted under each key it may use; a timestamp past what a clock
reads is refused with words. In-process, through Django's test client; the whole exchange between
two gateways is tests/processes/test_relay.py."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from gateway.relay import wire
from ledger.models import Job
from tests.support import installed_runtime

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BODY = json.dumps({"event": {"type": "backup.ready", "payload": {"n": 1}}}).encode()


def signed(body: bytes, path: str = "/ingest/peer/home-primary", *, stamp=None, secret="s3cret", key_id=None) -> dict:
    stamp = stamp or wire.now_stamp()
    headers = {
        "HTTP_X_DUCTILE_PEER": "home-primary",
        "HTTP_X_DUCTILE_TIMESTAMP": stamp,
        "HTTP_X_DUCTILE_SIGNATURE": "sha256=" + wire.sign("POST", path, stamp, body, secret),
    }
    if key_id is not None:
        headers["HTTP_X_DUCTILE_KEY_ID"] = key_id
    return headers


def deliver(client: APIClient, body: bytes, headers: dict, path: str = "/ingest/peer/home-primary"):
    return client.generic("POST", path, body, content_type="application/json", **headers)


def post(client: APIClient, path: str):
    return deliver(client, BODY, signed(BODY, path), path)


def configure(config_dir, ingress):
    config_dir.extra["tokens"] = [{"name": "peer", "key": "s3cret"}]
    if ingress is not None:
        config_dir.extra["remote_ingress"] = ingress
    config_dir.extra["pipelines"] = [{"name": "take", "on": "backup.ready", "steps": [{"uses": "echo"}]}]


def envelope(event_type="backup.ready", dedupe_key=None, **origin) -> bytes:
    event: dict = {"type": event_type, "payload": {"n": 1}}
    if dedupe_key:
        event["dedupe_key"] = dedupe_key
    return json.dumps({"event": event, "origin": {"instance": "home-primary", **origin}}).encode()


def test_a_configured_listen_path_is_the_only_ingress(config_dir):
    configure(config_dir, {"listen_path": "/relay/in/", "peers": [{"name": "home-primary", "secret_ref": "peer"}]})
    with installed_runtime(config_dir):
        client = APIClient()
        accepted = post(client, "/relay/in/home-primary")
        assert accepted.status_code == 202, accepted.json()
        job = Job.objects.get(id=accepted.json()["job_id"])
        assert (job.plugin, job.submitted_by) == ("echo", "relay:home-primary")
        elsewhere = post(client, "/ingest/peer/home-primary")
        assert (elsewhere.status_code, elsewhere.json()) == (
            404,
            {"error": "no such endpoint: /ingest/peer/home-primary"},
        )
        assert post(client, "/relay/other/home-primary").status_code == 404
        assert client.get("/relay/in/home-primary").status_code == 404
        assert Job.objects.count() == 1


def test_without_remote_ingress_there_is_no_ingress(config_dir):
    configure(config_dir, None)
    with installed_runtime(config_dir):
        client = APIClient()
        answer = post(client, "/ingest/peer/home-primary")
        assert (answer.status_code, answer.json()) == (404, {"error": "no such endpoint: /ingest/peer/home-primary"})
        assert client.get("/ingest/peer/home-primary").status_code == 405
        assert not Job.objects.exists()


# -- key rotation (issue 33 item 14) and out-of-range timestamps (item 15) ------------------------


def test_a_peer_rotating_its_key_is_accepted_under_each_key_it_may_use(config_dir):
    configure(
        config_dir,
        {
            "require_key_id": True,
            "peers": [
                {
                    "name": "home-primary",
                    "secret_ref": "peer-v2",
                    "key_id": "v2",
                    "keys": [{"key_id": "v1", "secret_ref": "peer"}],
                }
            ],
        },
    )
    config_dir.extra["tokens"].append({"name": "peer-v2", "key": "n3w-s3cret"})
    with installed_runtime(config_dir):
        client = APIClient()
        cases = [
            ("v1", "s3cret", 202, None),
            ("v2", "n3w-s3cret", 202, None),
            ("v1", "n3w-s3cret", 403, "forbidden"),  # a key id picks its own secret, no other
            ("v3", "n3w-s3cret", 403, "relay key id mismatch"),
            ("", "n3w-s3cret", 403, "missing relay key id"),
        ]
        for number, (key_id, secret, status, error) in enumerate(cases):
            body = envelope(dedupe_key=f"rotation-{number}")
            answer = deliver(client, body, signed(body, secret=secret, key_id=key_id))
            assert answer.status_code == status, (key_id, secret, answer.json())
            assert error is None or answer.json() == {"error": error}
        assert Job.objects.count() == 2


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "999999999999"])
def test_a_timestamp_past_what_a_clock_reads_is_outside_the_skew_not_a_crash(config_dir, stamp):
    # Before: the conversion to UTC overflowed, a 500 with a traceback, before the signature was
    # even looked at. The original reads such a time and finds it outside the window: its words.
    configure(config_dir, {"peers": [{"name": "home-primary", "secret_ref": "peer"}]})
    with installed_runtime(config_dir):
        answer = deliver(APIClient(), BODY, signed(BODY, stamp=stamp))
        assert (answer.status_code, answer.json()) == (403, {"error": "relay timestamp outside allowed clock skew"})
        assert not Job.objects.exists()
