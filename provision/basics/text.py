"""Plain text for people (``--json`` is for scripts): tables, and the printable filter for text
others wrote."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None or c == "" else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character a terminal acts on shown as ``?``: ESC (and so the sequences
    it starts: clear the screen, move the cursor, set the title, OSC 52 clipboard writes), the
    other C0 and C1 controls, bidirectional overrides, line separators. Characters in ``keep``
    (a log's tabs) pass. One character for one, so the widths of a table stay what they were."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in keep else "?" for ch in text)


def printable_lines(text: str) -> str:
    """:func:`printable` for a log: its lines and tabs kept, a CRLF read as a newline."""
    if text.replace("\n", "").replace("\t", "").isprintable():
        return text     # nothing to show as "?": one pass over a whole document (a fleet's --json)
    return "\n".join(printable(line, "\t") for line in text.replace("\r\n", "\n").split("\n"))
