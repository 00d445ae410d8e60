"""The webhook listener as a real process: gunicorn serving `gateway.http.webhooks.wsgi` on its
own port (spec 000 §10, "Webhooks"), and refusing to start on a bad webhooks.yaml."""

from __future__ import annotations

import json

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.network import free_port
from tests.support.processes import ledger
from tests.support.waiting import wait_for
from tests.support.webhooks import DUCTILE, ENV, HUB, call, chunked, endpoint, sign, start_listener, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_gunicorn_serves_the_listener_on_its_own_port(process_db: ConfigDir) -> None:
    write_config(process_db)
    port = free_port()
    server = start_listener(process_db, port)
    try:

        def healthy() -> bool:
            assert server.poll() is None, server.communicate()[0]
            try:
                return call(port, "/healthz")[0] == 200
            except OSError:
                return False

        wait_for(healthy, timeout=60, what="the listener's /healthz")
        body = json.dumps({"payload": {"reason": "manual rebuild"}}).encode()
        headers = {"Content-Type": "application/json", HUB: "sha256=" + sign(body)}
        status, answer = call(port, "/webhook/github", body, headers)
        assert (status, answer["status"]) == (202, "queued")
        assert call(port, "/webhook/github", body, {HUB: sign(b"other")}) == (403, {"error": "forbidden"})
        assert call(port, "/nowhere", body) == (404, {"error": "not found"})
        # Only the webhook surface, even with the API's settings module in the environment.
        assert call(port, "/plugins") == (404, {"error": "not found"})
        assert call(port, "/webhook/github")[0] == 405
        # A chunked body has no Content-Length: it is read all the same, and bounded all the same.
        parts = [b'{"a":', b" 1}"]
        assert chunked(port, "/webhook/small", parts, {DUCTILE: sign(b"".join(parts), ENV["OTHER_SECRET"])}) == 202
        big = [b"x" * 40, b"x" * 40]
        assert chunked(port, "/webhook/small", big, {DUCTILE: sign(b"".join(big), ENV["OTHER_SECRET"])}) == 413
        status, health = call(port, "/healthz")
        assert health["queue_depth"] == 2
    finally:
        server.terminate()
        server.wait(timeout=30)
    jobs = ledger(process_db)
    assert [(j["id"], j["plugin"], j["command"], j["status"]) for j in jobs] == [
        (answer["job_id"], "probe", "handle", "queued"),
        (jobs[1]["id"], "probe", "poll", "queued"),
    ]
    assert jobs[0]["transitions"] == [["queued", "enqueued by webhook: endpoint github (/webhook/github)"]]
    # The forged and the oversized delivery, written by the worker as it stopped (ductile_site/gunicorn.py).
    tally = json.loads((process_db.db_path.parent / "webhook-rejections.json").read_text())
    assert tally["failures"] == 2
    assert tally["sources"]["127.0.0.1"]["last_reason"] == "small: body over 64 bytes"


def test_the_listener_refuses_to_start_on_a_bad_webhooks_yaml(process_db: ConfigDir) -> None:
    write_config(process_db, endpoint(secret_ref="nobody"))
    server = start_listener(process_db, free_port())
    output, _ = server.communicate(timeout=60)
    assert server.returncode != 0, output  # gunicorn halts: its worker failed to boot
    webhooks_yaml = process_db.path / "webhooks.yaml"
    assert f"{webhooks_yaml}:6 key webhooks.endpoints[0].secret_ref: secret_ref 'nobody'" in output
