"""Issue numbers and wave names in what users read: a doc that says "issue #24, still open" goes
stale the day the issue closes, and a reader outside the tracker cannot follow it. The docs state
the fact itself (what holds, where, which test shows it).

Sources the docs cite from other projects stay: ``owner/repo#N`` and ``repo#N`` shorthands and
URLs (``github.com/.../issues/123``) name where a fact comes from, not this project's tracker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tests.docs import REPO, doc_files

# "issue #12", "Issue 12", "issues 3 and 4", "the issue's rule", "(#12)", "#12 item 3", "PR #7";
# a bare "#N" only where no repository name or path is glued to its left (tensorflow/tpu#877 is a
# source) and no word follows on its right (an anchor such as #1-install).
_PATTERNS = (
    re.compile(r"\b(?:issues?|PR|pull request)\s*#?\d+", re.IGNORECASE),
    re.compile(r"\bthe issue(?:['’]s|\s+(?:asks|says|rule|promise))", re.IGNORECASE),
    re.compile(r"\b(?:last|this|next|previous) wave\b|\bwave \d+\b", re.IGNORECASE),
    re.compile(r"(?<![\w/.\-#])#\d+\b(?![\w-])"),
)
_URL = re.compile(r"https?://\S+")


@dataclass(frozen=True)
class IssueRef:
    """An issue reference as a doc writes it, and where."""

    where: str
    text: str


def in_line(line: str) -> list[str]:
    """The issue references in one line of prose (URLs are sources, never references)."""
    prose = _URL.sub(" ", line)
    return [m.group(0) for pattern in _PATTERNS for m in pattern.finditer(prose)]


def user_docs(root: Path = REPO) -> list[Path]:
    """README.md, docs/*.md, the shipped job specs and the examples' specs and READMEs."""
    return [*doc_files(root), *sorted((root / "templates").glob("*.yaml")),
            *sorted((root / "examples").glob("*/spec.yaml")), *sorted((root / "examples").glob("*/README*"))]


def find(paths: Iterable[Path]) -> list[IssueRef]:
    out: list[IssueRef] = []
    for path in paths:
        rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            out += [IssueRef(f"{rel}:{n}", text) for text in in_line(line)]
    return out
