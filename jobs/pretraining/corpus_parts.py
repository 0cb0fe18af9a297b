"""A corpus cut into parts by bytes, each part a whole number of documents.

The corpus (local text files, one sentence per line, a blank line between documents) is seen
as one byte string of ``T`` bytes; part ``p`` of ``P`` is given the byte range
``[p*T//P, (p+1)*T//P)`` and owns the documents that begin in it. A reader finds the first
document of its range by itself (:func:`cut`: the end of the first blank line that starts at or
after the range's start), so no part needs to read another part's bytes, and the parts are a
pure function of the corpus and ``P``. A file's end also ends a document.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import ConfigError

_NEWLINES = re.compile(r"\r\n?|\n")


@dataclass(frozen=True)
class Span:
    path: str
    start: int  # byte offsets within the file
    end: int
    size: int = -1  # the file's size (-1: ask the file system)


def part_spans(paths: Sequence[str], sizes: Sequence[int], part: int, parts: int) -> list[Span]:
    """The byte ranges of each file that part ``part`` of ``parts`` is given."""
    total = sum(sizes)
    lo, hi = part * total // parts, (part + 1) * total // parts
    spans, offset = [], 0
    for path, size in zip(paths, sizes):
        start, end = max(lo - offset, 0), min(hi - offset, size)
        if start < end:
            spans.append(Span(path, start, end, size))
        offset += size
    return spans


def cut(f, boundary: int, size: int) -> int:
    """Where the document that owns ``boundary`` ends: 0 at the file's start, else the end of
    the first blank line starting at or after ``boundary`` (or the file's end)."""
    if boundary <= 0:
        return 0
    if boundary >= size:
        return size
    f.seek(boundary - 1)
    pos = boundary - 1 + len(f.readline())  # the first line start >= boundary
    while pos < size:
        line = f.readline()
        pos += len(line)
        if not line.strip():
            return pos
    return size


def documents(span: Span, open_file: Callable[[str], BinaryIO] | None = None
              ) -> Iterator[tuple[list[str], int]]:
    """(sentences, bytes) of each document owned by ``span``, as text lines. ``open_file``
    opens the file for seeking and reading lines (default: the local file system; the Beam
    pipeline passes Beam's FileSystems, so gs:// corpora are read in place)."""
    size = span.size if span.size >= 0 else os.path.getsize(span.path)
    with (open_file or open_local)(span.path) as f:
        start, end = cut(f, span.start, size), cut(f, span.end, size)
        f.seek(start)
        pos, doc, nbytes = start, [], 0
        while pos < end:
            raw = f.readline()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"{span.path} is not UTF-8 text (bad bytes at offset "
                                  f"{pos}); give a plain-text corpus, one sentence per line")
            pos += len(raw)
            for line in _NEWLINES.split(text.rstrip("\r\n")) if text.strip() else [""]:
                line = line.strip()
                if line:
                    doc.append(line)
                    nbytes += len(line)
                elif doc:
                    yield doc, nbytes
                    doc, nbytes = [], 0
        if doc:
            yield doc, nbytes


def open_local(path: str) -> BinaryIO:
    return open(path, "rb")
