"""`pipeline visualize`: a compiled pipeline as a Mermaid flowchart. Pure."""

from __future__ import annotations

import re

from pipelines.dsl import SWITCH_FALSE, SWITCH_TRUE, Pipeline


def _safe(node_id: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)


def mermaid(pipeline: Pipeline) -> str:
    trigger = ("hook " if pipeline.is_hook else "on ") + pipeline.trigger
    if pipeline.from_plugin:
        trigger += f" from {pipeline.from_plugin}"
    lines = ["flowchart TD", f'    trigger(["{trigger}"])']
    for node in pipeline.nodes.values():
        if node.kind == "switch":
            lines.append(f'    {_safe(node.id)}{{"if: {node.id.removesuffix("__switch")}"}}')
        else:
            label = f"{node.id}<br/>{node.plugin}.{node.command}"
            lines.append(f'    {_safe(node.id)}["{label}"]')
    condition = " (if)" if pipeline.condition else ""
    for entry in pipeline.entries:
        lines.append(f"    trigger -->{'|if|' if condition else ''} {_safe(entry)}")
    for source, edges in pipeline.edges.items():
        for wanted, target in edges:
            label = {SWITCH_TRUE: "|true|", SWITCH_FALSE: "|false|"}.get(wanted or "", "")
            lines.append(f"    {_safe(source)} -->{label} {_safe(target)}")
    return "\n".join(lines)
