"""The documentation's examples, collected: every fenced block of README.md and docs/*.md.

A shell block (```bash, ```sh, ```shell or ```console) is run by ``tests/docs/test_examples.py``
as written, unless the line just before its fence marks it (docs/contributing.md):

    <!-- example: skip real GCP: needs a billing account -->    not run here, and why
    <!-- example: given: tpuctl up bert-lab -->                  run this first, unshown
    <!-- example: expect: resumed -->                             its output must hold this
    <!-- example: expect: /resumed .* step=[2-9][0-9]/ -->         ... or match this (a regex)
    <!-- example: fakegcp -->                                     run against the fake Google Cloud

A ```console block is a transcript: each ``$ command`` runs and its output (stdout, then stderr)
must be the lines below it. A fence without an info string is refused, so no shell example can
hide as plain text: ```text is for synopses and output, and yaml/json/toml/python for the rest.

``python -m tests.docs`` prints every shell block with its status.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console"})
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<kind>skip|given|expect|fakegcp)\s*:?\s*(?P<rest>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and what its marker says."""

    path: Path
    line: int  # the line of the opening fence, 1-based
    lang: str
    text: str
    skip: str | None = None  # the reason it is not run here
    given: tuple[str, ...] = field(default=())  # commands run first, not shown
    expect: tuple[str, ...] = field(default=())  # text its output must hold (``/REGEX/``: match)
    fakegcp: bool = False  # run with the provider gcp against tests/fakegcp

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGS

    @property
    def status(self) -> str:
        return "skip" if self.skip else "run (fake GCP)" if self.fakegcp else "run"


def holds(output: str, text: str) -> bool:
    """Whether ``output`` holds what an ``expect:`` line asks: TEXT as written, or, for
    ``/REGEX/``, a match of REGEX anywhere (a number's range: ``step=[2-9][0-9]``)."""
    if len(text) > 2 and text.startswith("/") and text.endswith("/"):
        return re.search(text[1:-1], output, re.MULTILINE) is not None
    return text in output


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        lang = m.group("info").strip().split(" ")[0].lower() if m.group("info").strip() else ""
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        skip, given, expect, fake = _marker(lines, start)
        out.append(Block(path, start + 1, lang, "\n".join(body) + "\n", skip, given, expect, fake))
    return out


def _marker(lines: list[str], fence_index: int) -> tuple[str | None, tuple[str, ...], tuple[str, ...], bool]:
    """The ``<!-- example: ... -->`` comments on the lines right above a fence."""
    skip, given, expect, fake = None, [], [], False
    j = fence_index - 1
    while j >= 0:
        m = _MARKER.match(lines[j])
        if not m:
            break
        if m.group("kind") == "skip":
            skip = m.group("rest") or "(no reason given)"
        elif m.group("kind") == "fakegcp":
            fake = True
        elif m.group("kind") == "given":
            given.insert(0, m.group("rest"))
        else:
            expect.insert(0, m.group("rest"))
        j -= 1
    return skip, tuple(given), tuple(expect), fake


def all_blocks(root: Path = REPO) -> list[Block]:
    return [b for path in doc_files(root) for b in blocks(path)]


def shell_blocks(root: Path = REPO) -> list[Block]:
    return [b for b in all_blocks(root) if b.is_shell]


def transcript(text: str) -> list[tuple[str, str]]:
    """A console block as ``(command, expected output)`` pairs (``$ `` lines start a command,
    a trailing backslash continues it)."""
    pairs: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + lines[i].strip()
            pairs.append((command, []))
        elif pairs:
            pairs[-1][1].append(line)
        i += 1
    return [(c, "\n".join(out).strip()) for c, out in pairs]


def table(root: Path = REPO) -> str:
    """Each shell block, its status and, for a skipped one, why."""
    rows = [(b.where, b.lang, b.status, b.skip or "") for b in shell_blocks(root)]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'BLOCK':<{width}}  LANG     STATUS          WHY NOT RUN"]
    lines += [f"{w:<{width}}  {lang:<7}  {s:<14}  {why}".rstrip() for w, lang, s, why in rows]
    ran = sum(1 for r in rows if r[2] != "skip")
    lines.append(f"{len(rows)} shell blocks: {ran} run by make test, {len(rows) - ran} marked not runnable here")
    return "\n".join(lines)
