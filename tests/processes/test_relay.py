"""Remote Event Relay between two real gateways, each its own `system start` with workers on its
own database (spec 000 "Remote Event Relay", its end-to-end example): a sender's pipeline relays
`backup.ready` to `lab`, whose own pipeline runs on it, submitted by `relay:home-primary`, with
only the baggage its peer policy allows; the sender's pipeline moves on with the acceptance.
`ductile relay send` delivers the CLI example; a replay is deduplicated; refusals are answered
and enqueue nothing."""

from __future__ import annotations

import json
import sqlite3

import pytest

from gateway.relay import wire
from tests.support import ConfigDir, ductile, ductile_json, ledger, wait_for
from tests.support.live_api import TOKEN, live_api, post_bytes

pytestmark = pytest.mark.slow

SECRET = "relay-shared-secret-9f2c"
ADMIN = [{"name": "admin", "token": TOKEN, "scopes": ["*"]}]


def receiver_config(path) -> ConfigDir:
    cfg = ConfigDir(path)
    cfg.service["name"] = "lab"
    cfg.extra["tokens"] = [{"name": "relay-lab-v1", "key": SECRET}]
    cfg.extra["remote_ingress"] = {
        "listen_path": "/ingest/peer",
        "max_body_size": "4KB",
        "allowed_clock_skew": "5m",
        "require_key_id": True,
        "peers": [
            {
                "name": "home-primary",
                "secret_ref": "relay-lab-v1",
                "key_id": "v1",
                "accept": ["backup.ready"],
                "baggage": {"allow": ["trace_id"]},
            }
        ],
    }
    cfg.extra["pipelines"] = [
        {
            "name": "process-offsite-backup",
            "on": "backup.ready",
            "steps": [{"id": "verify", "uses": "echo", "baggage": {"checked": "payload.archive_id"}}],
        }
    ]
    return cfg


def sender_config(path, lab_port: int) -> ConfigDir:
    cfg = ConfigDir(path)
    cfg.service["name"] = "home-primary"
    cfg.extra["tokens"] = [{"name": "relay-lab-v1", "key": SECRET}]
    cfg.extra["instances"] = [
        {
            "name": "lab",
            "base_url": f"http://127.0.0.1:{lab_port}",
            "ingress_path": "/ingest/peer/home-primary",
            "secret_ref": "relay-lab-v1",
            "key_id": "v1",
            "timeout": "10s",
            "allow": ["backup.ready"],
        }
    ]
    relay = {
        "to": "lab",
        "event": "backup.ready",
        "dedupe_key": "payload.archive",
        "with": {"archive_id": "payload.archive", "archive_path": "payload.path"},
        "baggage": {"trace_id": "payload.trace", "private": "payload.path"},
    }
    cfg.extra["pipelines"] = [
        {
            "name": "ship",
            "on": "backup.done",
            "steps": [{"id": "to-lab", "relay": relay}, {"id": "after", "uses": "probe"}],
        }
    ]
    return cfg


def rows(cfg: ConfigDir, sql: str) -> list[tuple]:
    with sqlite3.connect(cfg.db_path) as db:
        return db.execute(sql).fetchall()


def test_a_pipeline_relays_to_another_gateway_whose_pipeline_runs_on_it(tmp_path):
    lab = receiver_config(tmp_path / "lab")
    with live_api(lab, ADMIN, workers=True) as served_lab:
        home = sender_config(tmp_path / "home", served_lab.port)
        with live_api(home, ADMIN, workers=True):
            payload = {"archive": "nightly-2026-11-27", "path": "/srv/backups/latest.tar.zst", "trace": "tr-789"}
            preview = ductile(home, "pipeline", "dry-run", "ship", "--payload", json.dumps(payload))
            assert "ship:to-lab  relay backup.ready to lab  depth 1" in preview.stdout, preview.stdout
            assert '"dedupe_key": "nightly-2026-11-27"' in preview.stdout.split("sends ", 1)[1].splitlines()[0]
            published = ductile(home, "event", "publish", "backup.done", "--payload", json.dumps(payload))
            assert published.returncode == 0, published.stderr

            def relayed():
                jobs = {j["plugin"]: j for j in ledger(home) if j["command"] == "handle"}
                done = [j for j in jobs.values() if j["status"] in ("succeeded", "dead", "failed")]
                return jobs if len(done) == 2 else None

            jobs = wait_for(
                relayed,
                timeout=60,
                what="the sender's relay step and the step after it",
                explain=lambda: json.dumps(ledger(home), indent=1),
            )
            assert jobs["core.relay"]["status"] == "succeeded" and jobs["probe"]["status"] == "succeeded"
            (result,) = rows(home, f"SELECT result FROM job_log WHERE job_id = '{jobs['core.relay']['id']}'")
            accepted = json.loads(result[0])["result"]["accepted"]
            assert accepted["status"] == "accepted" and accepted["peer"] == "home-primary"

            # On lab: its own pipeline, started by the relayed event, as a root of its own.
            remote = wait_for(
                lambda: next((j for j in ledger(lab) if j["plugin"] == "echo" and j["status"] == "succeeded"), None),
                timeout=60,
                what="lab's pipeline to run",
            )
            assert remote["id"] == accepted["job_id"]
            submitted_by, raw_event = rows(
                lab, f"SELECT submitted_by, event FROM job_queue WHERE id = '{remote['id']}'"
            )[0]
            assert submitted_by == "relay:home-primary"
            event = json.loads(raw_event)
            assert event["type"] == "backup.ready" and event["source"] == "relay:home-primary"
            assert event["payload"] == {"archive_id": payload["archive"], "archive_path": payload["path"]}
            assert event["dedupe_key"] == payload["archive"]
            (baggage,) = rows(
                lab,
                "SELECT accumulated_json FROM event_context WHERE id = "
                f"(SELECT event_context_id FROM job_queue WHERE id = '{remote['id']}')",
            )[0]
            context = json.loads(baggage)
            # The peer policy admits trace_id; `private` stays behind; the step's own claim is there.
            assert context["trace_id"] == "tr-789" and "private" not in context
            assert context["checked"] == payload["archive"]

            # The CLI example, twice: the same dedupe key is one job on lab.
            send = [
                "relay",
                "send",
                "lab",
                "--event",
                "backup.ready",
                "--payload",
                json.dumps({"archive_id": "by-hand"}),
                "--dedupe-key",
                "backup.ready:by-hand",
                "--origin-plugin",
                "backup-runner",
            ]
            code, first = ductile_json(home, *send)
            assert code == 0 and first["status"] == "accepted" and first["job_id"], first
            code, again = ductile_json(home, *send)
            assert code == 0 and again["job_id"] == first["job_id"]
            code, refused = ductile_json(home, "relay", "send", "lab", "--event", "report.generated")
            assert code == 1 and "does not allow event 'report.generated'" in refused["error"]
            code, refused = ductile_json(home, "relay", "send", "lab", "--event", "Backup Ready")
            assert code == 2 and "must be lower-case dotted" in refused["error"]


def signed(body: bytes, *, path="/ingest/peer/home-primary", stamp=None, secret=SECRET, **overrides) -> dict:
    stamp = stamp or wire.now_stamp()
    headers = {
        "Content-Type": "application/json",
        wire.PEER: "home-primary",
        wire.KEY_ID: "v1",
        wire.TIMESTAMP: stamp,
        wire.SIGNATURE: wire.sign("POST", path, stamp, body, secret),
    }
    headers.update(overrides)
    return {k: v for k, v in headers.items() if v is not None}


def test_the_ingress_refuses_what_it_cannot_trust_and_enqueues_nothing(tmp_path):
    lab = receiver_config(tmp_path / "lab")
    with live_api(lab, ADMIN) as served:
        base = served.api.base
        good = json.dumps(
            {"event": {"type": "backup.ready", "payload": {"archive_id": "a1"}}, "origin": {"instance": "home-primary"}}
        )
        body = good.encode()
        cases = [
            ("/ingest/peer/stranger", signed(body, path="/ingest/peer/stranger"), body, 403, "unknown relay peer"),
            ("/ingest/peer/home-primary", signed(body, secret="wrong"), body, 403, "forbidden"),
            ("/ingest/peer/home-primary", signed(body, **{wire.KEY_ID: None}), body, 403, "missing relay key id"),
            ("/ingest/peer/home-primary", signed(body, **{wire.KEY_ID: "v2"}), body, 403, "relay key id mismatch"),
            ("/ingest/peer/home-primary", signed(body, **{wire.PEER: "lab"}), body, 403, "peer identity mismatch"),
            (
                "/ingest/peer/home-primary",
                signed(body, stamp="2026-01-01T00:00:00Z"),
                body,
                403,
                "outside allowed clock skew",
            ),
            ("/ingest/peer/home-primary", signed(b"x" * 5000), b"x" * 5000, 413, "relay payload too large"),
            ("/ingest/peer/home-primary", signed(b"[1]"), b"[1]", 400, "must be an object with an `event` object"),
        ]
        deep = b'{"event": {"type": "backup.ready", "payload": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_002
        cases += [
            ("/ingest/peer/home-primary", signed(deep), deep, 413, "relay payload too large"),  # 4 KB here
            (
                "/ingest/peer/home-primary",
                signed(body, stamp="99999999999999999999"),
                body,
                403,
                "invalid relay timestamp",
            ),
        ]
        # Admitted baggage is stored: nested past what the ledger stores, it is refused, not a 500.
        nested = b'{"event": {"type": "backup.ready", "payload": {"archive_id": "a"}}, "baggage": {"trace_id": '
        nested += b"[" * 600 + b"]" * 600 + b"}}"
        cases.append(("/ingest/peer/home-primary", signed(nested), nested, 400, "baggage"))
        other = json.dumps({"event": {"type": "report.generated", "payload": {}}}).encode()
        cases.append(("/ingest/peer/home-primary", signed(other), other, 422, "event type not allowed for peer"))
        # lab's entry step claims payload.archive_id: without it the trigger fails (spec 000, baggage).
        bare = json.dumps({"event": {"type": "backup.ready", "payload": {"n": 1}}}).encode()
        missing = (
            "pipeline 'process-offsite-backup' step 'verify': baggage checked: source payload.archive_id is missing"
        )
        cases.append(("/ingest/peer/home-primary", signed(bare), bare, 400, missing))
        for path, headers, sent, code, words in cases:
            status, answer = post_bytes(base + path, sent, headers)
            assert (status, words in answer.get("error", "")) == (code, True), (path, headers, status, answer)
        assert [j for j in ledger(lab) if j["command"] == "handle"] == []
        status, answer = post_bytes(base + "/ingest/peer/home-primary", body, signed(body))
        assert status == 202 and answer["status"] == "accepted" and answer["event_type"] == "backup.ready"
        (job,) = [j for j in ledger(lab) if j["command"] == "handle"]
        assert job["id"] == answer["job_id"]
        assert rows(lab, f"SELECT submitted_by FROM job_queue WHERE id = '{job['id']}'") == [("relay:home-primary",)]
