"""The relay ingress at a `remote_ingress.listen_path` of the operator's choosing (served through
the URLconf's last route): a signed POST there is accepted; the default path, another path and
another method are the API's 404 or 405, and a gateway without `remote_ingress` has no ingress at
all. A replayed request, or a sender's retry of one event, is answered as the first was and starts
nothing; a peer rotating its key is accepted under each key it may use; a timestamp past what a
clock reads is refused with words. In-process, through Django's test client; the whole exchange
between two gateways is tests/processes/test_relay.py."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone
from rest_framework.test import APIClient

from gateway.relay import wire
from ledger.models import AttemptOutcome, Job, RelayAcceptance
from ledger.states import JobStatus
from ledger.timestamps import rfc3339
from tests.support.runtime import installed_runtime

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

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


# -- replays and retries (issue 33 item 4) ------------------------------------------------------


def earlier(seconds: float) -> str:
    """Another timestamp inside the skew window: what a sender's retry signs anew."""
    return rfc3339(timezone.now() - timedelta(seconds=seconds))


def test_a_replayed_request_is_answered_as_first_accepted_and_starts_nothing_whatever_its_job_does(config_dir):
    # No dedupe key, no origin event id: only the signature can tell a replay. Before, each replay
    # of the captured request started the pipeline again while the first job was queued, running
    # or failed (the queue's dedupe matched a succeeded job only, and here there was no key at all).
    configure(config_dir, {"peers": [{"name": "home-primary", "secret_ref": "peer"}]})
    with installed_runtime(config_dir):
        client = APIClient()
        body, headers = envelope(), signed(envelope())
        first = deliver(client, body, headers)
        assert first.status_code == 202, first.json()
        accepted = first.json()
        assert accepted["status"] == "accepted" and accepted["job_id"] and accepted["receiver_event_id"]

        def replay():
            again = deliver(client, body, headers)
            assert (again.status_code, again.json()) == (202, accepted)
            assert list(Job.objects.values_list("id", flat=True)) == [accepted["job_id"]]

        replay()  # queued
        # The same signature written another way (no prefix, upper-case hex) is the same signature.
        bare = dict(headers, HTTP_X_DUCTILE_SIGNATURE=headers["HTTP_X_DUCTILE_SIGNATURE"][7:].upper())
        assert deliver(client, body, bare).json() == accepted
        job = Job.objects.claim_next(worker_id="w1", caps={"echo": 1}, lease_ttl=60)
        assert job is not None and job.id == accepted["job_id"]
        replay()  # running
        job.record_outcome(AttemptOutcome(status=JobStatus.FAILED, retryable=False), worker="w1", default_dedupe_ttl=60)
        assert Job.objects.get(id=job.id).status == JobStatus.FAILED
        replay()  # failed
        # Another request, signed anew: a new event, as before (nothing says it is the same one).
        other = deliver(client, body, signed(body, stamp=earlier(1)))
        assert other.status_code == 202 and other.json()["job_id"] != accepted["job_id"]


def test_a_sender_retry_with_the_same_dedupe_key_or_origin_event_id_is_answered_as_first_accepted(config_dir):
    # A sender that timed out sends again: a new timestamp, so a new signature, but the same dedupe
    # key (or, without one, the same origin event id). Before, it started the pipeline a second
    # time unless the first job had already succeeded.
    configure(config_dir, {"peers": [{"name": "home-primary", "secret_ref": "peer"}]})
    config_dir.extra["pipelines"].append({"name": "other", "on": "backup.other", "steps": [{"uses": "probe"}]})
    with installed_runtime(config_dir):
        client = APIClient()
        keyed, by_origin = envelope(dedupe_key="nightly-1"), envelope(event_id="evt-456")
        answers = {}
        for name, body in (("keyed", keyed), ("by_origin", by_origin)):
            first = deliver(client, body, signed(body))
            assert first.status_code == 202, first.json()
            answers[name] = first.json()
            again = deliver(client, body, signed(body, stamp=earlier(2)))
            assert (again.status_code, again.json()) == (202, answers[name]), name
        assert Job.objects.count() == 2
        # The key is the sender's name for one event of one type: another type or key is new work.
        other_type = envelope("backup.other", dedupe_key="nightly-1")
        assert deliver(client, other_type, signed(other_type)).json()["job_id"] not in {
            a["job_id"] for a in answers.values()
        }
        other_key = envelope(dedupe_key="nightly-2")
        assert deliver(client, other_key, signed(other_key)).json()["job_id"] != answers["keyed"]["job_id"]
        assert Job.objects.count() == 4
        # Past its window an acceptance answers no more: the queue's own dedupe decides again.
        RelayAcceptance.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        fresh = deliver(client, keyed, signed(keyed, stamp=earlier(3)))
        assert fresh.status_code == 202 and fresh.json()["job_id"] != answers["keyed"]["job_id"]
        assert Job.objects.count() == 5


@pytest.mark.django_db(transaction=True)  # the copies arrive on threads, each on its own connection
def test_copies_of_a_delivery_arriving_at_once_start_one_run(config_dir):
    # Each thread its own database connection, as each API process (or node) has: the ledger's
    # unique constraints decide, not a process's memory (on PostgreSQL, concurrent transactions).
    configure(config_dir, {"peers": [{"name": "home-primary", "secret_ref": "peer"}]})
    with installed_runtime(config_dir):
        body = envelope(dedupe_key="at-once")
        requests = [signed(body)] * 3 + [signed(body, stamp=earlier(n)) for n in (1, 2, 3)]
        barrier = threading.Barrier(len(requests))
        answers: list[tuple[int, dict]] = []

        def deliver_one(headers: dict) -> None:
            try:
                barrier.wait()
                answer = deliver(APIClient(), body, headers)
                answers.append((answer.status_code, answer.json()))
            finally:
                connections.close_all()

        threads = [threading.Thread(target=deliver_one, args=(headers,)) for headers in requests]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(answers) == len(requests) and all(status == 202 for status, _ in answers), answers
        assert len({json.dumps(answer, sort_keys=True) for _, answer in answers}) == 1, answers
        assert list(Job.objects.values_list("id", flat=True)) == [answers[0][1]["job_id"]]


def test_a_dedupe_key_the_ledger_cannot_hold_is_refused_with_words(config_dir):
    # Before: accepted on SQLite, which keeps any length, and a 500 on PostgreSQL's varchar(512).
    configure(config_dir, {"peers": [{"name": "home-primary", "secret_ref": "peer"}]})
    with installed_runtime(config_dir):
        client = APIClient()
        cases = [
            (envelope(dedupe_key="k" * 600), "event.dedupe_key is too long to deduplicate on: a key of 600 characters"),
            (envelope(event_id="e" * 600), "origin.event_id is too long to deduplicate on: a key of 632 characters"),
            (envelope(dedupe_key="k\u0000"), "event.dedupe_key"),
        ]
        for body, words in cases:
            answer = deliver(client, body, signed(body))
            assert answer.status_code == 400 and words in answer.json()["error"], answer.json()
        assert not Job.objects.exists() and not RelayAcceptance.objects.exists()


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


def test_baggage_that_would_pass_the_context_cap_is_a_413_with_the_sizes_as_the_apis(config_dir):
    # Before: a 400 with words only, where POST /pipeline answers 413 {bytes_actual, bytes_limit}.
    peer = {"name": "home-primary", "secret_ref": "peer", "baggage": {"allow": ["blob"]}}
    configure(config_dir, {"max_body_size": "4MB", "peers": [peer]})
    body = json.dumps(
        {"event": {"type": "backup.ready", "payload": {}}, "baggage": {"blob": "x" * (1024 * 1024 + 10)}}
    ).encode()
    with installed_runtime(config_dir):
        answer = deliver(APIClient(), body, signed(body))
    assert answer.status_code == 413, answer.json()
    said = answer.json()
    assert said["bytes_limit"] == 1024 * 1024 and said["bytes_actual"] > said["bytes_limit"], said
    assert not Job.objects.exists() and not RelayAcceptance.objects.exists()
