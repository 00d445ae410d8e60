"""The relay sender against real HTTP servers on this machine (http.server in a thread) that
answer as a receiver might: a 202 is an acceptance, a 5xx or 429 a failure worth retrying, a 4xx
one that is not unless it names a key id or the clock (a rotation under way, a clock step: the
next attempt may pass), and a redirect is an answer, never followed (the signature was made for one
path, and urllib would follow a POST as a bare GET). And what the wire refuses on the receiving
side without a crash: an envelope nested past the stack, bytes that are not JSON, a timestamp out of
range or without a zone (one past what a datetime holds is told apart: it is outside the window)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from types import MappingProxyType

import pytest

from gateway.config.relay_endpoints import Relay, RelayInstance
from gateway.relay import wire
from gateway.relay.sender import RelayFailed, send
from tests.support.network import http_server

ENVELOPE = wire.Envelope("backup.ready", {"id": 1}, "k-1", {"instance": "home"})


@contextmanager
def receiver(status: int, body: dict, headers: dict[str, str] | None = None) -> Iterator[tuple[int, list]]:
    seen: list[tuple[str, str, dict, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_GET = answer

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as port:
        yield port, seen


def relay_to(port: int) -> Relay:
    lab = RelayInstance("lab", f"http://127.0.0.1:{port}", "/ingest/peer/home", "s3cret", "v1", 5.0, frozenset())
    return Relay(MappingProxyType({"lab": lab}))


def test_an_accepted_send_is_signed_as_the_receiver_checks_it():
    answer = {
        "status": "accepted",
        "peer": "home",
        "event_type": "backup.ready",
        "receiver_event_id": "e",
        "job_id": "j",
    }
    with receiver(202, answer) as (port, seen):
        accepted = send(relay_to(port), "home", "lab", ENVELOPE)
    assert accepted.as_dict() == answer
    ((method, path, headers, body),) = seen
    assert (method, path, headers[wire.PEER], headers[wire.KEY_ID]) == ("POST", "/ingest/peer/home", "home", "v1")
    assert wire.signature_matches("POST", path, headers[wire.TIMESTAMP], body, headers[wire.SIGNATURE], "s3cret")
    assert wire.read_envelope(body) == ENVELOPE


@pytest.mark.parametrize(
    ("status", "error", "retryable"),
    [
        (500, "no thanks", True),
        (503, "no thanks", True),
        (429, "no thanks", True),
        (403, "forbidden", False),
        (403, "unknown relay peer", False),
        (422, "event type not allowed for peer", False),
        (400, "invalid JSON body", False),
        # A key the receiver does not know yet (a rotation under way) or clocks out of step: the
        # next attempt signs anew and may pass. Before, each failed the relay for good.
        (403, "relay key id mismatch", True),
        (403, "missing relay key id", True),
        (403, "relay timestamp outside allowed clock skew", True),
    ],
)
def test_a_refusal_says_whether_a_retry_could_help(status, error, retryable):
    with receiver(status, {"error": error}) as (port, _), pytest.raises(RelayFailed) as caught:
        send(relay_to(port), "home", "lab", ENVELOPE)
    assert caught.value.retryable is retryable and caught.value.status == status
    assert str(caught.value).endswith(f"answered {status}: {error}")


def test_a_redirect_is_an_answer_not_a_new_destination():
    moved = {"Location": "http://127.0.0.1:9/elsewhere"}
    with receiver(302, {}, moved) as (port, seen), pytest.raises(RelayFailed) as caught:
        send(relay_to(port), "home", "lab", ENVELOPE)
    assert caught.value.status == 302 and caught.value.retryable is False
    assert [s[0] for s in seen] == ["POST"]  # sent once, not followed


def test_hostile_envelopes_and_timestamps_are_refused_with_words_not_a_crash():
    deep = b'{"event": {"type": "backup.ready", "payload": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_002
    with pytest.raises(wire.BadEnvelope, match="nests deeper"):
        wire.read_envelope(deep)
    with pytest.raises(wire.BadEnvelope, match="invalid JSON body"):
        wire.read_envelope(b"\xff\xfe not json")
    for stamp in ("99999999999999999999", "2026-11-27", "2026-11-27T22:00:00", "yesterday"):
        with pytest.raises(ValueError) as caught:
            wire.parse_timestamp(stamp)
        assert not isinstance(caught.value, wire.OutOfRange), stamp
    # Well-formed, and past what a datetime holds: far outside any window, not malformed.
    for stamp in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "999999999999"):
        with pytest.raises(wire.OutOfRange):
            wire.parse_timestamp(stamp)
    assert wire.parse_timestamp("2026-11-27T22:00:00.123456789Z").microsecond == 123456  # Go's nanoseconds
