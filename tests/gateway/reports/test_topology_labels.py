"""`GET /topology`'s Mermaid chart names plugins, events and pipelines that the config, an agent or
a plugin chose: none of them can reconfigure the chart or leave its label."""

from __future__ import annotations

from gateway.reports.topology import mermaid

DIRECTIVE = '%%{init: {"theme": "forest"}}%%"] --> x["\nclick x call alert()'


def test_names_in_the_topology_chart_carry_no_directive():
    nodes = [
        {"id": "plugin:a", "kind": "plugin", "name": f"a{DIRECTIVE}"},
        {"id": "event:e", "kind": "event", "name": f"e.{DIRECTIVE}"},
    ]
    edges = [
        {"from": "plugin:a", "to": "event:e", "kind": "emits"},
        {
            "from": "event:e",
            "to": "plugin:a",
            "kind": "triggers",
            "via": "pipeline",
            "pipeline": DIRECTIVE,
            "command": "c",
        },
    ]
    chart = mermaid(nodes, edges)
    lines = chart.splitlines()
    assert len(lines) == 5 and "%" not in chart  # the header, two nodes, two edges: no line of the names'
    assert [line.count('"') for line in lines] == [0, 2, 2, 0, 2]  # each label one quoted string
