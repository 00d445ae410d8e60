"""Remote Event Relay between two real gateways, each its own `system start` with workers on its
own database (spec 000 "Remote Event Relay", its end-to-end example): a sender's pipeline relays
`backup.ready` to `lab`, whose own pipeline runs on it, submitted by `relay:home-primary`, with
only the baggage its peer policy allows; the sender's pipeline moves on with the acceptance.
`ductile relay send` delivers the CLI example; a request captured on the wire and replayed, or a
sender's retry of an event, is answered as the first delivery was and runs nothing twice, whatever
became of its job; refusals are answered and enqueue nothing. The two trees start once for the
tests that need both (`pair`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gateway.relay import wire
from tests.support.config_dirs import ConfigDir
from tests.support.live_api import TOKEN, LiveApi, live_api, post_bytes
from tests.support.network import http_server
from tests.support.processes import ductile, ductile_json, ledger
from tests.support.waiting import wait_for

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
                "accept": ["backup.ready", "archive.check"],
                "baggage": {"allow": ["trace_id"]},
            }
        ],
    }
    cfg.extra["pipelines"] = [
        {
            "name": "process-offsite-backup",
            "on": "backup.ready",
            "steps": [{"id": "verify", "uses": "echo", "baggage": {"checked": "payload.archive_id"}}],
        },
        # stress as its payload says (`mode: error`: failed, for good with its one attempt), and it
        # leaves a file in `marker_dir` for each time it runs.
        {"name": "check-archive", "on": "archive.check", "steps": [{"id": "check", "uses": "stress"}]},
    ]
    return cfg


def sender_config(path, lab_port: int, tap_port: int) -> ConfigDir:
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
        },
        {  # lab again, through a tap that keeps what it forwards
            "name": "lab-tap",
            "base_url": f"http://127.0.0.1:{tap_port}",
            "ingress_path": "/ingest/peer/home-primary",
            "secret_ref": "relay-lab-v1",
            "key_id": "v1",
        },
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
        },
        {  # no dedupe key: the receiver deduplicates on the origin event id the relay step sends
            "name": "check",
            "on": "archive.made",
            "steps": [{"id": "to-lab", "relay": {"to": "lab-tap", "event": "archive.check"}}],
        },
    ]
    return cfg


def rows(cfg: ConfigDir, sql: str) -> list[tuple]:
    with sqlite3.connect(cfg.db_path) as db:
        return db.execute(sql).fetchall()


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: bytes


@contextmanager
def tap(target: str) -> Iterator[tuple[int, list[Captured]]]:
    """A loopback proxy in front of `target` (lab's API) that keeps each request it forwards: a
    relay delivery as whoever listens on the network path between two gateways has it."""
    captured: list[Captured] = []

    class Forward(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {k: v for k, v in self.headers.items() if k.lower().startswith("x-ductile-")}
            captured.append(Captured(self.path, headers, body))
            status, answer = post_bytes(target + self.path, body, {"Content-Type": "application/json", **headers})
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Forward) as port:
        yield port, captured


@dataclass
class Pair:
    lab: ConfigDir
    served_lab: LiveApi
    home: ConfigDir
    captured: list[Captured]
    markers: Path  # where lab's stress runs leave a file each


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Iterator[Pair]:
    """lab and home-primary, each its own `system start` with workers, home sending to lab directly
    (`lab`) and through a tap (`lab-tap`)."""
    root = tmp_path_factory.mktemp("relay")
    lab = receiver_config(root / "lab")
    with live_api(lab, ADMIN, workers=True) as served_lab, tap(served_lab.api.base) as (tap_port, captured):
        home = sender_config(root / "home", served_lab.port, tap_port)
        markers = root / "markers"
        markers.mkdir()
        with live_api(home, ADMIN, workers=True):
            yield Pair(lab, served_lab, home, captured, markers)


def test_a_pipeline_relays_to_another_gateway_whose_pipeline_runs_on_it(pair):
    lab, home = pair.lab, pair.home
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
    submitted_by, raw_event = rows(lab, f"SELECT submitted_by, event FROM job_queue WHERE id = '{remote['id']}'")[0]
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
    # --dry-run (000: every change can be previewed): checked and signed, shown, never sent.
    code, dry = ductile_json(home, *send[:-4], "--dedupe-key", "backup.ready:dry", "--dry-run")
    assert code == 0 and dry["dry_run"] is True and dry["url"].endswith("/ingest/peer/home-primary"), dry
    assert dry["body"]["event"] == {
        "type": "backup.ready",
        "payload": {"archive_id": "by-hand"},
        "dedupe_key": "backup.ready:dry",
    }
    assert not rows(lab, "SELECT id FROM job_queue WHERE dedupe_key = 'backup.ready:dry'")
    code, refused = ductile_json(home, "relay", "send", "lab", "--event", "report.generated", "--dry-run")
    assert code == 1 and "does not allow event 'report.generated'" in refused["error"]
    code, refused = ductile_json(home, "relay", "send", "lab", "--event", "report.generated")
    assert code == 1 and "does not allow event 'report.generated'" in refused["error"]
    code, refused = ductile_json(home, "relay", "send", "lab", "--event", "Backup Ready")
    assert code == 2 and "must be lower-case dotted" in refused["error"]


def test_a_captured_delivery_or_a_senders_retry_runs_nothing_twice_though_its_job_failed(pair):
    # Before: lab deduplicated only on a job that had succeeded, so each replay of the captured
    # request, and each retry of `relay send`, started lab's pipeline again while the first job
    # was queued, running or (here) failed.
    lab, home, markers = pair.lab, pair.home, pair.markers

    def stress_jobs() -> list[dict]:
        return [j for j in ledger(lab) if j["plugin"] == "stress" and j["command"] == "handle"]

    def all_dead(count: int):
        jobs = stress_jobs()
        return jobs if len(jobs) == count and all(j["status"] == "dead" for j in jobs) else None

    # home's pipeline relays through the tap: its relay step is accepted, lab's job fails for good.
    failing = {"mode": "error", "marker_dir": str(markers)}
    published = ductile(home, "event", "publish", "archive.made", "--payload", json.dumps(failing))
    assert published.returncode == 0, published.stderr
    (failed,) = wait_for(lambda: all_dead(1), timeout=60, what="lab's job to fail for good")

    def acceptance() -> dict | None:
        relayed = "SELECT l.result FROM job_log l JOIN job_queue q ON q.id = l.job_id "
        relayed += "WHERE q.plugin = 'core.relay' AND q.status = 'succeeded'"
        answers = [json.loads(result)["result"]["accepted"] for (result,) in rows(home, relayed)]
        return next((a for a in answers if a["event_type"] == "archive.check"), None)

    accepted = wait_for(acceptance, timeout=60, what="home's relay step to record lab's acceptance")
    assert accepted["job_id"] == failed["id"]
    (delivery,) = pair.captured

    # The captured request, sent again as it was: the first acceptance's answer, nothing enqueued.
    for _ in range(2):
        status, answer = post_bytes(pair.served_lab.api.base + delivery.path, delivery.body, delivery.headers)
        assert (status, answer) == (202, accepted)

    # A sender's own retry (signed anew) of one event, by its origin event id: one job, one run.
    send = ["relay", "send", "lab-tap", "--event", "archive.check", "--payload", json.dumps(failing)]
    send += ["--origin-event-id", "evt-456"]
    code, first = ductile_json(home, *send)
    assert code == 0 and first["job_id"], first
    code, again = ductile_json(home, *send)
    assert (code, again["job_id"], again["receiver_event_id"]) == (0, first["job_id"], first["receiver_event_id"])
    wait_for(lambda: all_dead(2), timeout=60, what="lab's second job to fail for good")
    code, late = ductile_json(home, *send)  # after its job failed, too
    assert code == 0 and late["job_id"] == first["job_id"]
    assert {j["id"] for j in stress_jobs()} == {failed["id"], first["job_id"]}
    assert sorted(p.name.split(".")[0] for p in markers.glob("*.start")) == sorted([failed["id"], first["job_id"]])


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
        headers = signed(body)
        status, answer = post_bytes(base + "/ingest/peer/home-primary", body, headers)
        assert status == 202 and answer["status"] == "accepted" and answer["event_type"] == "backup.ready"
        (job,) = [j for j in ledger(lab) if j["command"] == "handle"]
        assert job["id"] == answer["job_id"]
        assert rows(lab, f"SELECT submitted_by FROM job_queue WHERE id = '{job['id']}'") == [("relay:home-primary",)]
        # Replayed while its job waits (no workers here): the same answer, no second job. Before,
        # with no dedupe key and no origin event id, each replay enqueued the pipeline again.
        assert post_bytes(base + "/ingest/peer/home-primary", body, headers) == (202, answer)
        assert [j["id"] for j in ledger(lab) if j["command"] == "handle"] == [job["id"]]
