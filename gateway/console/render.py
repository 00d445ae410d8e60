"""Small pieces of HTML the console's pages share: status badges, links to a job, durations,
capped text, and JSON as a tree of collapsible `<details>` (no script, works offline)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

# Badge colours by meaning, not by name: static/ductile/console.css gives each a light and a dark look.
TONES = {
    "queued": "wait",
    "running": "busy",
    "succeeded": "ok",
    "failed": "bad",
    "timed_out": "bad",
    "dead": "bad",
    "closed": "ok",
    "open": "bad",
    "half_open": "warn",
    "active": "ok",
    "paused_manual": "warn",
    "paused_invalid": "bad",
    "exhausted": "quiet",
    "not_started": "quiet",
    "healthy": "ok",
    "unhealthy": "bad",
    "unknown": "quiet",
    "live": "ok",
    "silent": "warn",
    "gone": "quiet",
    "loaded": "ok",
    "disabled": "quiet",
    "skipped": "bad",
    "ok": "ok",
    "changed": "bad",
    "not sealed": "warn",
    "unreadable": "bad",
    "locked out": "bad",
}

# What a page shows of one text (stderr is stored up to 64 KiB): its head and its tail, where a
# traceback ends.
TEXT_CAP = 16 * 1024
# JSON bigger than this is shown as capped text, not as a tree of thousands of elements.
JSON_TREE_CAP = 256 * 1024
# Levels of a JSON tree open when the page loads; deeper ones open on a click.
OPEN_LEVELS = 2
# Containers with more entries than this start closed whatever their depth.
OPEN_ENTRIES = 25


def badge(value: str | None) -> SafeString:
    text = value or "-"
    return format_html('<span class="ductile-badge ductile-{}">{}</span>', TONES.get(text, "quiet"), text)


def short_id(job_id: str) -> str:
    return job_id[:8]


def job_link(job_id: str | None, text: str | None = None) -> SafeString:
    """A job id as a link to its page; the short form shows, the whole id is the title."""
    if not job_id:
        return mark_safe("-")
    return format_html(
        '<a class="ductile-id" href="{}" title="{}">{}</a>', job_url(job_id), job_id, text or short_id(job_id)
    )


def job_url(job_id: str) -> str:
    return reverse("admin:ledger_job_change", args=[job_id])


def duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return "-"
    return seconds((end - start).total_seconds())


def seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def nanoseconds(value: int | None) -> str:
    return "-" if value is None else seconds(value / 1e9)


def capped(text: str, cap: int = TEXT_CAP) -> tuple[str, int]:
    """`text` as shown: whole when short, else its first and last halves of `cap` around a line
    saying how much was left out. Also returns the number of characters left out."""
    if len(text) <= cap:
        return text, 0
    half = cap // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n… {omitted:,} characters not shown …\n{text[-half:]}", omitted


def json_tree(value: Any) -> SafeString:
    """`value` as nested, collapsible `<details>`; strings in full, keys and scalars coloured."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > JSON_TREE_CAP:
        shown, _ = capped(text, JSON_TREE_CAP)
        return format_html(
            '<p class="help">Too large to show as a tree ({} characters); the start and end as text.</p>'
            '<pre class="ductile-pre">{}</pre>',
            f"{len(text):,}",
            shown,
        )
    if not isinstance(value, dict | list) or not value:
        return format_html('<span class="ductile-json-inline">{}</span>', _scalar(value))
    return format_html('<div class="ductile-json">{}</div>', _node(None, value, 0))


def _node(key: str | None, value: Any, depth: int) -> SafeString:
    label = format_html('<span class="ductile-json-key">{}</span>: ', key) if key is not None else ""
    if isinstance(value, dict | list) and value:
        items = list(value.items()) if isinstance(value, dict) else [(f"[{i}]", v) for i, v in enumerate(value)]
        opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
        count = f"{len(items)} {'key' if isinstance(value, dict) else 'item'}{'s' if len(items) != 1 else ''}"
        children = format_html_join("", "{}", ((_node(str(k), v, depth + 1),) for k, v in items))
        is_open = depth < OPEN_LEVELS and len(items) <= OPEN_ENTRIES
        return format_html(
            '<details{}><summary>{}{}<span class="ductile-json-count">{}</span></summary>'
            '<div class="ductile-json-body">{}</div><span class="ductile-json-punct">{}</span></details>',
            " open" if is_open else "",
            label,
            format_html('<span class="ductile-json-punct">{}</span>', opening),
            count,
            children,
            closing,
        )
    return format_html('<div class="ductile-json-leaf">{}{}</div>', label, _scalar(value))


def _scalar(value: Any) -> SafeString:
    if isinstance(value, str):
        kind = "str"
    elif value is None or isinstance(value, bool):
        kind = "lit"
    elif isinstance(value, int | float):
        kind = "num"
    else:
        kind = "punct"  # an empty {} or []
    return format_html('<span class="ductile-json-{}">{}</span>', kind, json.dumps(value, ensure_ascii=False))


_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def linkify(text: str) -> SafeString:
    """`text`, escaped, with every job id in it a link to that job's page (messages, reasons)."""
    out, last = [], 0
    for match in _UUID.finditer(text):
        out.append(escape(text[last : match.start()]))
        out.append(job_link(match.group(0), match.group(0)))
        last = match.end()
    out.append(escape(text[last:]))
    return mark_safe("".join(out))
