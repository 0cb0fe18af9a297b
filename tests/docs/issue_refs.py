"""Issue numbers and wave names in what users read: a doc that points at a tracker entry "still
open" goes stale the day it closes, and a reader outside the tracker cannot follow it. The docs
state the fact itself (what holds, where, which test shows it). The same holds for the docstrings
of the code and of the tests: a docstring says why, and a tracker number is no reason.

Sources the docs cite from other projects stay: ``owner/repo#N`` and ``repo#N`` shorthands,
``repo PR #N`` (a repository's name before it) and URLs (``github.com/.../issues/123``) name
where a fact comes from, not this project's tracker.
"""

from __future__ import annotations

import ast
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
# the word before "PR #6351" or "issue 877" that makes it another project's tracker, a source:
# a repository's name ("cluster-toolkit PR #6351", "tensorflow/tpu issue 877")
_REPOSITORY = re.compile(r"\(?[\w.]+[/-][\w./-]+")
# a triple-quoted string, where a docstring is
_TRIPLE = re.compile(r'"""(.*?)"""|\'\'\'(.*?)\'\'\'', re.DOTALL)


@dataclass(frozen=True)
class IssueRef:
    """An issue reference as a doc writes it, and where."""

    where: str
    text: str


def in_line(line: str) -> list[str]:
    """The issue references in one line of prose (URLs are sources, never references)."""
    prose = _URL.sub(" ", line)
    sources = [m.span() for m in _PATTERNS[0].finditer(prose)
               if _REPOSITORY.fullmatch((prose[:m.start()].split() or [""])[-1])]
    return [m.group(0) for pattern in _PATTERNS for m in pattern.finditer(prose)
            if not any(start <= m.start() < end for start, end in sources)]


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


# Where code and tests live: their docstrings follow the docs' rule.
CODE_DIRS = ("provision", "jobs", "examples", "tests")


def docstrings(root: Path = REPO) -> list[IssueRef]:
    """The issue references in the docstrings (module, class, function) of every Python file
    under :data:`CODE_DIRS`, each at its file and line."""
    out: list[IssueRef] = []
    for top in CODE_DIRS:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            source = path.read_text(encoding="utf-8")
            if not any(in_line(m.group(0)) for m in _TRIPLE.finditer(source)):
                continue                   # parsed only where a triple-quoted string holds a reference
            for node in ast.walk(ast.parse(source, filename=str(rel))):
                if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                doc = ast.get_docstring(node, clean=False)
                if not doc:
                    continue
                first = node.body[0].lineno
                for n, line in enumerate(doc.splitlines()):
                    out += [IssueRef(f"{rel}:{first + n}", text) for text in in_line(line)]
    return out
