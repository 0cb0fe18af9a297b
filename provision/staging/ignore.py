"""``--exclude`` patterns and ``.tpuctlignore``: which relative paths staging leaves alone.

A gitignore-like subset, pure. One pattern per line; blank lines and ``#`` comments are skipped.

- ``*.tmp``: a pattern without ``/`` matches a file or directory name at any depth.
- ``logs/tmp`` or ``/eval``: a pattern with ``/`` is anchored at the root of SRC (and DEST).
- ``events/``: a trailing ``/`` matches directories only (everything under them).
- ``*`` and ``?`` stay within one path segment, ``**`` crosses segments, ``[abc]`` is a class.
- ``!keep.txt`` re-includes; the last matching pattern wins.

Excluded paths are neither sent nor compared nor deleted by ``--delete`` (as gsutil rsync -x).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..basics.errors import UsageError

IGNORE_FILE = ".tpuctlignore"


@dataclass(frozen=True)
class Rule:
    pattern: str
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    anchored: bool

    def matches(self, segments: Sequence[str]) -> bool:
        last = len(segments) if not self.dir_only else len(segments) - 1
        if self.anchored:
            return any(self.regex.fullmatch("/".join(segments[:k])) for k in range(1, last + 1))
        return any(self.regex.fullmatch(seg) for seg in segments[:last])


def glob_to_regex(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and _class_end(glob, i) > 0:
            end = _class_end(glob, i)
            body = glob[i + 1:end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        elif glob[i] == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def _class_end(glob: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at ``start``, or -1 (then ``[`` is literal)."""
    j = start + 1
    if j < len(glob) and glob[j] == "!":
        j += 1
    if j < len(glob) and glob[j] == "]":
        j += 1
    return glob.find("]", j)


def parse_rule(pattern: str) -> Rule | None:
    """One pattern as written on the command line or a line of ``.tpuctlignore``; None if blank."""
    text = pattern.rstrip("\r\n")
    if not text.endswith("\\ "):
        text = text.rstrip()
    if not text or text.startswith("#"):
        return None
    negate = text.startswith("!")
    if negate or text.startswith(("\\!", "\\#")):
        text = text[1:]
    dir_only = text.endswith("/")
    text = text.rstrip("/")
    anchored = "/" in text
    text = text.lstrip("/")
    if not text:
        raise UsageError(f"invalid exclude pattern {pattern!r}", hint="give a file or directory pattern such as '*.tmp' or 'logs/'")
    try:
        regex = re.compile(glob_to_regex(text))
    except (re.error, ValueError):
        raise UsageError(f"invalid exclude pattern {pattern!r}", hint="check its [...] character class") from None
    return Rule(pattern, regex, negate, dir_only, anchored)


def parse_ignore_file(text: str) -> list[str]:
    """The patterns of a ``.tpuctlignore`` file, comments and blank lines dropped."""
    return [line for line in text.splitlines() if parse_rule(line) is not None]


class Excluder:
    """Compiled patterns; ``excluded(path)`` for a relative ``a/b/c`` path."""

    def __init__(self, patterns: Iterable[str] = ()):
        self.patterns = list(patterns)
        self.rules = [r for r in (parse_rule(p) for p in self.patterns) if r is not None]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def excluded(self, path: str) -> bool:
        segments = path.split("/")
        verdict = False
        for rule in self.rules:
            if rule.matches(segments):
                verdict = not rule.negate
        return verdict
