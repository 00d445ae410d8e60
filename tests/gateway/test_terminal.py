"""Control and format characters shown escaped on a terminal (gateway/terminal.py)."""

from __future__ import annotations

import sys
import unicodedata

from gateway.terminal import CONTROLS, LINE_CONTROLS, escape_controls, one_line

KEPT = {"\n", "\t", "\u200c", "\u200d"}  # line feed and tab of multi-line text; the joiners scripts need


def test_the_written_out_list_is_every_control_format_and_separator_character_of_this_python():
    wanted = {
        chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) in ("Cc", "Cf", "Zl", "Zp")
    }
    escaped = {chr(code) for code in range(sys.maxunicode + 1) if CONTROLS.fullmatch(chr(code))}
    assert escaped == wanted - KEPT
    assert {c for c in KEPT if LINE_CONTROLS.fullmatch(c)} == {"\n", "\t"}


def test_escapes_read_as_git_and_systemctl_write_them():
    hostile = "\x1b[2J\x1b]0;pwned\x07 \u202eexe.txt \x9b \U000e0041 é 日本 \u200d\ttab\nline"
    assert escape_controls(hostile) == (
        "\\x1b[2J\\x1b]0;pwned\\x07 \\u202eexe.txt \\x9b \\U000e0041 é 日本 \u200d\ttab\nline"
    )
    assert one_line("a\nb\tc\r") == "a\\x0ab\\x09c\\x0d"
