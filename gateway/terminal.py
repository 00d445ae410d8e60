"""Text that a plugin, an agent or a remote peer chose, made safe to print on a terminal: every
control and format character is shown as an escape (`\\x1b`, `\\u202e`), as git and systemctl show
them. So no escape sequence in a job's stderr reaches the terminal (clearing the screen, writing a
fake "ALL OK", setting the window's title, ringing its bell), and no bidi override, invisible
character or line separator changes what a person reads. Pure, no I/O.

What is escaped: Unicode's Cc (C0, DEL, C1), Cf (format: bidi embeddings, overrides and isolates,
zero-width space, BOM, invisible tags) and Zl/Zp (line and paragraph separators), except the line
feed and tab of multi-line text (`escape_controls`; `one_line` escapes those too) and the zero-width
joiner and non-joiner, which scripts and emoji need. The list is written out, not derived from
`unicodedata` at import (a walk of every code point costs a command's start ~0.1 s); a test holds
it to the running Python's Unicode tables.
"""

from __future__ import annotations

import re

_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200e\u200f\u2028-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
# Multi-line text keeps its line feeds and tabs; a table cell or a log line's field does not.
CONTROLS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT}]")
LINE_CONTROLS = re.compile(f"[\x00-\x1f\x7f-\x9f{_FORMAT}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(text: str) -> str:
    """`text` with its control and format characters escaped; line feeds and tabs kept."""
    return CONTROLS.sub(_escape, text)


def one_line(text: str) -> str:
    """`text` on one line: line feeds and tabs escaped too (a field of a row, a table's cell)."""
    return LINE_CONTROLS.sub(_escape, text)
