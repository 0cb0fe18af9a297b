"""Where worker 0's agent finds a ``job: command`` program's progress besides
``$TPUCTL_PROGRESS_FILE``: its output lines matched against the spec's ``progress_pattern``
(:mod:`jobs.command.patterns`), and the TensorBoard event files it writes (:mod:`.tbevents`).

Each source is read every beat from where the last read stopped, and gives progress objects that
:class:`provision.host.program.ProgressSink` folds into ``progress.json`` with the progress
file's lines (:func:`provision.runs.reports.fold_items`). Both are this attempt's only: the log is
the attempt's own, and event files already there when the attempt starts (an earlier attempt's,
restored with the checkpoint directory) are read from their end.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.command import patterns

from .tbevents import EventFiles

READ_BYTES = 4 << 20          # of the log, per beat
MATCH_BUDGET_S = 2.0          # matching one beat's lines may take this long before the pattern is dropped
OWN_PREFIX = b"[tpuctl] "     # the agent's own lines in the log


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

    def read(self, *, final: bool = False) -> list[dict[str, Any]]:
        if self.dropped:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(READ_BYTES)
        except OSError:
            return []
        self.offset += len(data)
        *lines, self.partial = re.split(rb"[\r\n]", self.partial + data)
        if final and self.partial:
            lines.append(self.partial)
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
                out.append(got)
            if time.monotonic() - began > MATCH_BUDGET_S:
                self.dropped = (f"progress_pattern took over {MATCH_BUDGET_S:g} s to match one beat's output; "
                                f"it is no longer matched in this attempt (simplify it)")
                print(f"tpuctl agent: {self.dropped}", file=sys.stderr, flush=True)
                break
        if len(self.partial) > limit:
            self.partial, self.overlong = b"", True
        return out


@dataclass
class Sources:
    """The sources of one attempt, read together."""

    lines: OutputLines | None = None
    events: EventFiles | None = None
    notes: list[str] = field(default_factory=list)

    def read(self, *, final: bool = False) -> list[dict[str, Any]]:
        items = []
        if self.events is not None:
            items += self.events.read()
        if self.lines is not None:
            items += self.lines.read(final=final)
        return items


def open_sources(*, pattern: str | None, log_path: Path | None, event_roots: list[Path]) -> Sources:
    """This attempt's sources: the log when the spec has a pattern, the event files under the
    roots that exist or will (a program makes its directories as it starts)."""
    lines = OutputLines(log_path, patterns.compile_pattern(pattern)) if pattern and log_path else None
    events = EventFiles(list(dict.fromkeys(event_roots))) if event_roots else None
    if events is not None:
        events.skip_existing()
    return Sources(lines=lines, events=events)
