"""`GET /topology` draws a `relay:` step as the remote gateway it sends to, not as a plugin called
`core.relay` of unknown state: the edge into it names the event it relays, and the step after it
starts from there."""

from __future__ import annotations

from gateway.reports.topology import topology
from gateway.runtime import build_runtime


def test_a_relay_step_is_the_remote_gateway_it_sends_to(config_dir):
    config_dir.extra["tokens"] = [{"name": "peer", "key": "k"}]
    config_dir.extra["instances"] = [
        {"name": "lab", "base_url": "https://lab.example", "ingress_path": "/ingest/peer/home", "secret_ref": "peer"}
    ]
    config_dir.extra["pipelines"] = [
        {
            "name": "ship",
            "on": "backup.done",
            "steps": [{"id": "out", "relay": {"to": "lab", "event": "backup.ready"}}, {"id": "then", "uses": "probe"}],
        }
    ]
    config_dir.write()
    graph = topology(build_runtime(config_dir.path))
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert nodes["relay:lab"] == {"id": "relay:lab", "kind": "relay", "name": "lab"}
    assert not any(n.endswith("core.relay") for n in nodes)
    edges = {(e["from"], e["kind"], e["to"]): e for e in graph["edges"] if e.get("pipeline") == "ship"}
    assert edges[("event:backup.done", "triggers", "relay:lab")]["relays"] == "backup.ready"
    assert edges[("relay:lab", "step", "plugin:probe")]["to_step"] == "then"
    assert '[/"lab"/]' in graph["mermaid"] and '|"ship: relay backup.ready"|' in graph["mermaid"]
