"""What to send, skip and delete, given the SRC and DEST listings: the pure core of staging.

A file is skipped only when DEST has it with the same size and the same CRC32C (rsync's
checksum mode, as gsutil rsync -c: modification times do not survive a round trip through a
bucket, so they decide nothing). Listings from a bucket carry the CRC32C; a local file's is
computed only when sizes already match, which :func:`needs_checksum` names for the caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .ignore import Excluder

SEND, SKIP, DELETE = "send", "skip", "delete"


@dataclass(frozen=True)
class Entry:
    """A file relative to the SRC or DEST root."""

    path: str
    size: int
    crc32c: int | None = None  # None: not read yet


@dataclass(frozen=True)
class Step:
    op: str  # SEND, SKIP or DELETE
    path: str
    size: int
    reason: str


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    excluded: int = 0
    problems: tuple[str, ...] = field(default=())

    def of(self, op: str) -> list[Step]:
        return [s for s in self.steps if s.op == op]

    @property
    def sends(self) -> list[Step]:
        return self.of(SEND)

    @property
    def skips(self) -> list[Step]:
        return self.of(SKIP)

    @property
    def deletes(self) -> list[Step]:
        return self.of(DELETE)

    def bytes(self, op: str) -> int:
        return sum(s.size for s in self.steps if s.op == op)


def index(entries: Iterable[Entry]) -> dict[str, Entry]:
    return {e.path: e for e in entries}


def apply_excludes(entries: Iterable[Entry], excluder: Excluder) -> tuple[list[Entry], int]:
    """Entries the patterns leave in, and how many they took out."""
    kept, dropped = [], 0
    for e in entries:
        if excluder.excluded(e.path):
            dropped += 1
        else:
            kept.append(e)
    return kept, dropped


def needs_checksum(src: Mapping[str, Entry], dest: Mapping[str, Entry]) -> list[tuple[str, str]]:
    """``(side, path)`` pairs whose CRC32C must be read before planning: same size on both sides."""
    out = []
    for path, s in src.items():
        d = dest.get(path)
        if d is None or d.size != s.size:
            continue
        if s.crc32c is None:
            out.append(("src", path))
        if d.crc32c is None:
            out.append(("dest", path))
    return out


def make_plan(src: Mapping[str, Entry], dest: Mapping[str, Entry], *, delete: bool = False,
              excluded: int = 0) -> Plan:
    steps: list[Step] = []
    for path in sorted(src):
        s, d = src[path], dest.get(path)
        if d is None:
            steps.append(Step(SEND, path, s.size, "new"))
        elif d.size != s.size:
            steps.append(Step(SEND, path, s.size, "size differs"))
        elif s.crc32c is None or d.crc32c is None:
            raise ValueError(f"CRC32C of {path} not known on both sides; read it first (needs_checksum)")
        elif s.crc32c != d.crc32c:
            steps.append(Step(SEND, path, s.size, "checksum differs"))
        else:
            steps.append(Step(SKIP, path, s.size, "unchanged"))
    if delete:
        steps.extend(Step(DELETE, path, dest[path].size, "not in source") for path in sorted(dest) if path not in src)
    return Plan(tuple(steps), excluded=excluded)


def local_name_problems(paths: Iterable[str]) -> list[str]:
    """Object names that cannot become local files: unsafe segments, or a file that is also a folder."""
    problems, names = [], set()
    for p in paths:
        segs = p.split("/")
        if p.startswith("/") or any(s in ("", ".", "..") for s in segs) or "\x00" in p:
            problems.append(f"{p!r} is not a safe local path")
        names.add(p)
    for p in sorted(names):
        parts = p.split("/")
        for k in range(1, len(parts)):
            parent = "/".join(parts[:k])
            if parent in names:
                problems.append(f"{parent!r} is both a file and a folder (of {p!r})")
                break
    return problems


def order_for_transfer(steps: Iterable[Step]) -> list[Step]:
    """Largest first: big files are cut into parts early, small ones fill the pool's gaps."""
    return sorted(steps, key=lambda s: (-s.size, s.path))
