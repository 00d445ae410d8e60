"""Hostile input through a real listener process (gunicorn): a signed webhook past Django's own
upload limit is accepted within its endpoint's, and deep JSON is a 400 (issue "One front door for
every job", defect 4)."""

from __future__ import annotations

import json

import pytest

from tests.gateway.http.test_hostile_input import BIG, BIG_HOOK, DEEP, deep_json
from tests.support.network import free_port
from tests.support.processes import stop_gracefully
from tests.support.waiting import wait_for
from tests.support.webhooks import HUB, call, listener_up, sign, start_listener, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_big_signed_webhook_through_gunicorn_is_accepted(process_db, content_type):
    write_config(process_db, BIG_HOOK)
    port = free_port()
    server = start_listener(process_db, port)
    try:
        wait_for(lambda: listener_up(port), timeout=60, what="the listener")
        body = json.dumps({"blob": "x" * BIG}).encode()
        status, answer = call(port, "/webhook/big", body, {"Content-Type": content_type, HUB: sign(body)})
        assert status == 202, answer
        deep = deep_json(DEEP)
        status, answer = call(port, "/webhook/big", deep, {"Content-Type": content_type, HUB: sign(deep)})
        assert status == 400 and "nest" in answer["error"], answer
    finally:
        stop_gracefully(server)
