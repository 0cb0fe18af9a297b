"""Where worker 0's agent finds a ``job: command`` program's progress besides
``$TPUCTL_PROGRESS_FILE``: its output lines matched against the spec's ``progress_pattern``
(:mod:`jobs.command.patterns`), and the TensorBoard event files it writes (:mod:`.tbevents`).

Each source is read every beat from where the last read stopped (a ``gs://`` model directory's
event files too: one listing and a ranged read of what grew, :class:`.tbevents.BucketEventFiles`),
and gives progress objects that
:class:`provision.host.program.ProgressSink` folds into ``progress.json`` with the progress
file's lines (:func:`provision.runs.reports.fold_items`). Both are this attempt's only: the log is
the attempt's own, and event files already there when the attempt starts (an earlier attempt's,
restored with the checkpoint directory) are read from their end.

Each object carries when its step was first seen (``_t``), finer than the beat: an event's own
``wall_time``; for a line, the first look that found the file grown past its end (:class:`Arrivals`:
a ``stat`` every :data:`provision.host.agent.STEP_LOOK_S`, no read), so a step is dated to within
that, not to the beat.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.command import patterns

from .tbevents import BucketEventFiles, EventFiles

READ_BYTES = 4 << 20          # of the log, per beat
MAX_MARKS = 256               # sizes kept between two reads (the older ones merge into the next)
MATCH_BUDGET_S = 2.0          # matching one beat's lines may take this long before the pattern is dropped
OWN_PREFIX = b"[tpuctl] "     # the agent's own lines in the log


@dataclass
class Arrivals:
    """When the bytes of a file that only grows were first seen: the file's size at each look that
    found it grown, and when. A line is dated by the first look that saw its end: at most
    :data:`provision.host.agent.STEP_LOOK_S` after the program wrote it (a ``stat`` is all a look costs)."""

    path: Path
    marks: list[tuple[int, float]] = field(default_factory=list)     # (size, time), sizes increasing

    def look(self, now: float) -> None:
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return
        if self.marks and size <= self.marks[-1][0]:
            return
        self.marks.append((size, now))
        if len(self.marks) > MAX_MARKS:
            # merge the oldest into their successors: their bytes are dated later, never earlier
            self.marks = self.marks[MAX_MARKS // 2:]

    def at(self, end: int) -> float | None:
        """When the file was first seen at least ``end`` bytes long; None if no look saw it yet."""
        for size, t in self.marks:
            if size >= end:
                return t
        return None

    def consumed(self, offset: int) -> None:
        """Forget what dates only bytes before ``offset`` (read already)."""
        while self.marks and self.marks[0][0] <= offset:
            self.marks.pop(0)


def dated(items: list[tuple[dict[str, Any] | None, float | None]]) -> list[dict[str, Any] | None]:
    """Progress objects with when they were first seen (``_t``) where known."""
    out = []
    for item, t in items:
        if item is not None:
            item.pop("_t", None)
            if t is not None:
                item["_t"] = t
        out.append(item)
    return out


@dataclass
class OutputLines:
    """The program's output (the attempt's log: its stdout and stderr) matched line by line. A
    ``\\r`` ends a line too (progress bars redraw with it); a line longer than
    :data:`jobs.command.patterns.MAX_LINE` characters is never matched."""

    path: Path
    pattern: re.Pattern[str]
    offset: int = 0
    partial: bytes = b""
    overlong: bool = False            # the line being read is already too long: skip to its end
    dropped: str | None = None        # why the pattern is no longer matched
    arrivals: Arrivals | None = None  # when each line was first seen (None: at the read)

    def __post_init__(self) -> None:
        if self.arrivals is None:
            self.arrivals = Arrivals(self.path)

    def look(self, now: float) -> None:
        if not self.dropped and self.arrivals is not None:
            self.arrivals.look(now)

    def read(self, *, final: bool = False) -> list[dict[str, Any]]:
        if self.dropped:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(READ_BYTES)
        except OSError:
            return []
        pos = self.offset - len(self.partial)       # where the first line begins in the file
        self.offset += len(data)
        *lines, self.partial = re.split(rb"[\r\n]", self.partial + data)
        ends = []
        for raw in lines:
            pos += len(raw) + 1
            ends.append(pos)
        if final and self.partial:
            lines.append(self.partial)
            ends.append(pos + len(self.partial))
            self.partial = b""
        limit = patterns.MAX_LINE * 4             # UTF-8: at most 4 bytes a character
        out: list[dict[str, Any]] = []
        began = time.monotonic()
        for i, raw in enumerate(lines):
            if i == 0 and self.overlong:
                self.overlong = False
                continue
            if len(raw) > limit or raw.startswith(OWN_PREFIX):
                continue
            got = patterns.match(self.pattern, raw.decode("utf-8", "replace"))
            if got is not None:
                out += dated([(got, self.arrivals.at(ends[i]) if self.arrivals is not None else None)])
            if time.monotonic() - began > MATCH_BUDGET_S:
                self.dropped = (f"progress_pattern took over {MATCH_BUDGET_S:g} s to match one beat's output; "
                                f"it is no longer matched in this attempt (simplify it)")
                print(f"tpuctl agent: {self.dropped}", file=sys.stderr, flush=True)
                break
        if len(self.partial) > limit:
            self.partial, self.overlong = b"", True
        if self.arrivals is not None:
            self.arrivals.consumed(self.offset - len(self.partial))
        return out


@dataclass
class Sources:
    """The sources of one attempt, read together."""

    lines: OutputLines | None = None
    events: EventFiles | None = None
    bucket_events: BucketEventFiles | None = None
    notes: list[str] = field(default_factory=list)

    def look(self, now: float) -> None:
        """How far the log has grown (a stat): what dates its lines (event files date themselves)."""
        if self.lines is not None:
            self.lines.look(now)

    def read(self, *, final: bool = False) -> list[dict[str, Any]]:
        items = []
        if self.events is not None:
            items += self.events.read()
        if self.bucket_events is not None:
            items = sorted(items + self.bucket_events.read(), key=lambda i: (i["step"], i.get("_t") or 0.0))
        if self.lines is not None:
            items += self.lines.read(final=final)
        return items


def open_sources(*, pattern: str | None, log_path: Path | None, event_roots: list[Path],
                 event_bucket: tuple[str, Callable[[], Any]] | None = None) -> Sources:
    """This attempt's sources: the log when the spec has a pattern, the event files under the
    roots that exist or will (a program makes its directories as it starts), and under
    ``event_bucket``, a ``gs://`` model directory and how to open its bucket."""
    lines = OutputLines(log_path, patterns.compile_pattern(pattern)) if pattern and log_path else None
    events = EventFiles(list(dict.fromkeys(event_roots))) if event_roots else None
    if events is not None:
        events.skip_existing()
    remote = BucketEventFiles(*event_bucket) if event_bucket is not None else None
    if remote is not None:
        remote.skip_existing()
    return Sources(lines=lines, events=events, bucket_events=remote)
