"""What a `relay:` step sends (DSL reference §3.5), computed from its input event and baggage:
the payload (`with:`, or the event's own), the dedupe key and the envelope's baggage. Pure."""

from __future__ import annotations

import pytest

from pipelines.relay_step import RelayStepError, parse, project

EVENT = {"type": "backup.done", "payload": {"archive": "nightly-7", "size": 42, "path": "/srv/b"}, "dedupe_key": "up"}
CONTEXT = {"trace_id": "tr-1", "ductile": {"pipeline": "p", "step": "ship"}}


def test_with_projects_the_remote_payload_from_paths_and_templates():
    spec = parse(
        {
            "to": "lab",
            "event": "backup.ready",
            "with": {
                "archive_id": "payload.archive",
                "bytes": "payload.size",
                "note": "{payload.archive} of {context.trace_id}",
            },
            "dedupe_key": "payload.archive",
            "baggage": {"trace_id": "context.trace_id"},
        }
    )
    sent = project(spec, EVENT, CONTEXT)
    assert sent.payload == {"archive_id": "nightly-7", "bytes": 42, "note": "nightly-7 of tr-1"}
    assert sent.dedupe_key == "nightly-7"
    assert sent.baggage == {"trace_id": "tr-1"}


def test_without_with_the_event_payload_and_its_dedupe_key_travel_as_they_are():
    sent = project(parse({"to": "lab", "event": "backup.ready"}), EVENT, CONTEXT)
    assert sent.payload == EVENT["payload"] and sent.dedupe_key == "up" and sent.baggage == {}


def test_a_missing_path_is_an_error_never_a_null():
    spec = parse({"to": "lab", "event": "backup.ready", "with": {"who": "payload.owner"}})
    with pytest.raises(RelayStepError, match=r"with\.who: \{payload\.owner\} is missing"):
        project(spec, EVENT, CONTEXT)
    spec = parse({"to": "lab", "event": "backup.ready", "baggage": {"t": "context.nothing"}})
    with pytest.raises(RelayStepError, match=r"source context\.nothing is missing"):
        project(spec, EVENT, CONTEXT)
