"""`pipeline visualize`: a compiled pipeline as a Mermaid flowchart (spec 001 §7.1). Pure."""

from __future__ import annotations

import re

from pipelines.dsl import SWITCH_FALSE, SWITCH_SUFFIX, SWITCH_TRUE, Pipeline


def mermaid_label(text: str) -> str:
    """Text that is safe inside a quoted Mermaid label."""
    return text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def mermaid(pipeline: Pipeline) -> str:
    # Mermaid ids are derived from the step id but must be unique: `a-b` and `a_b` are two steps.
    ids: dict[str, str] = {}
    for node_id in pipeline.nodes:
        base = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)
        candidate, n = base, 1
        while candidate in ids.values():
            n += 1
            candidate = f"{base}_{n}"
        ids[node_id] = candidate
    trigger = ("hook " if pipeline.is_hook else "on ") + pipeline.trigger
    if pipeline.from_plugin:
        trigger += f" from {pipeline.from_plugin}"
    lines = ["flowchart TD", f'    trigger(["{mermaid_label(trigger)}"])']
    for node in pipeline.nodes.values():
        if node.kind == "switch":
            lines.append(f'    {ids[node.id]}{{"if: {mermaid_label(node.id.removesuffix(SWITCH_SUFFIX))}"}}')
        else:
            label = f"{mermaid_label(node.id)}<br/>{mermaid_label(node.plugin)}.{mermaid_label(node.command)}"
            lines.append(f'    {ids[node.id]}["{label}"]')
    for entry in pipeline.entries:
        lines.append(f"    trigger -->{'|if|' if pipeline.condition else ''} {ids[entry]}")
    for source, edges in pipeline.edges.items():
        for wanted, target in edges:
            label = {SWITCH_TRUE: "|true|", SWITCH_FALSE: "|false|"}.get(wanted or "", "")
            lines.append(f"    {ids[source]} -->{label} {ids[target]}")
    return "\n".join(lines)
