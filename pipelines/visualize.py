"""`pipeline visualize`: a compiled pipeline as a Mermaid flowchart (spec 001 §7.1). Pure."""

from __future__ import annotations

import re
import unicodedata

from pipelines.dsl import SWITCH_FALSE, SWITCH_SUFFIX, SWITCH_TRUE, Pipeline

# Kept as they are in a quoted label; every other character that is not a letter or a digit is
# written as Mermaid's entity code (`#37;`), which it draws as the character itself.
_PLAIN = frozenset(" _.:/@+,=-()'!?*")
_NAMED = {'"': "#quot;", "&": "#amp;", "<": "#lt;", ">": "#gt;"}


def mermaid_label(text: str) -> str:
    """Text that is safe inside a quoted Mermaid label, whoever chose it (step ids, event types,
    plugin and pipeline names are the config's, an agent's or a plugin's): it cannot end the
    label (`"`), start a line, carry a directive (`%%{init: …}%%` reconfigures the whole
    diagram, wherever it stands in the text), HTML or markdown (a backtick). A control or format
    character (a line break, a bidi override) is drawn as its escape, `\\u202e`."""
    return "".join(_label_char(c) for c in text)


def _label_char(c: str) -> str:
    if c.isalnum() or c in _PLAIN:
        return c
    if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
        return f"#92;u{ord(c):04x}"
    return _NAMED.get(c) or f"#{ord(c)};"


TRIGGER_ID = "trigger"


def mermaid_ids(pipeline: Pipeline) -> dict[str, str]:
    """Each node's (step's) Mermaid id, as `mermaid()` draws it: what a page colours a step by."""
    # Derived from the step id but unique: `a-b` and `a_b` are two steps.
    ids: dict[str, str] = {}
    for node_id in pipeline.nodes:
        base = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)
        candidate, n = base, 1
        while candidate in ids.values():
            n += 1
            candidate = f"{base}_{n}"
        ids[node_id] = candidate
    return ids


def node_label(pipeline: Pipeline, node_id: str) -> str:
    """How a diagram names a node: a step by its id, a step's `if:` gate as "if: <step>"."""
    if pipeline.nodes[node_id].kind == "switch":
        return f"if: {node_id.removesuffix(SWITCH_SUFFIX)}"
    return node_id


def flow_order(pipeline: Pipeline) -> list[str]:
    """The nodes from the entries along the edges (breadth first), then any not reached that way:
    the order a list of a run's steps reads in."""
    order: list[str] = []
    frontier = list(pipeline.entries)
    while frontier:
        node_id = frontier.pop(0)
        if node_id in order:
            continue
        order.append(node_id)
        frontier += [target for _, target in pipeline.edges.get(node_id, ())]
    return order + [node_id for node_id in pipeline.nodes if node_id not in order]


def mermaid(pipeline: Pipeline) -> str:
    ids = mermaid_ids(pipeline)
    trigger = ("hook " if pipeline.is_hook else "on ") + pipeline.trigger
    if pipeline.from_plugin:
        trigger += f" from {pipeline.from_plugin}"
    lines = ["flowchart TD", f'    {TRIGGER_ID}(["{mermaid_label(trigger)}"])']
    for node in pipeline.nodes.values():
        if node.kind == "switch":
            lines.append(f'    {ids[node.id]}{{"{mermaid_label(node_label(pipeline, node.id))}"}}')
        elif node.relay is not None:
            sends = f"relay {node.relay.event} to {node.relay.to}"
            lines.append(f'    {ids[node.id]}[/"{mermaid_label(node.id)}<br/>{mermaid_label(sends)}"/]')
        else:
            label = f"{mermaid_label(node.id)}<br/>{mermaid_label(node.plugin)}.{mermaid_label(node.command)}"
            lines.append(f'    {ids[node.id]}["{label}"]')
    for entry in pipeline.entries:
        lines.append(f"    {TRIGGER_ID} -->{'|if|' if pipeline.condition else ''} {ids[entry]}")
    for source, edges in pipeline.edges.items():
        for wanted, target in edges:
            label = {SWITCH_TRUE: "|true|", SWITCH_FALSE: "|false|"}.get(wanted or "", "")
            lines.append(f"    {ids[source]} -->{label} {ids[target]}")
    return "\n".join(lines)
