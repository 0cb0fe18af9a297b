"""Where a test run's time goes: ``python -m tests.durations REPORT.xml [--files N] [--before OLD.xml]``.

Reads the JUnit XML that ``pytest --junitxml`` writes and prints the seconds per test directory
(``tests/unit``, ``tests/e2e``...) and the N most expensive test files, so the before/after table
of docs/contributing.md ("Test suite timings") comes from one command (``--before``). Times are pytest's per test:
set-up, call and tear-down, so a session fixture's cost lands on the first test that asks for it.
Under xdist the sum is worker time, about twice the wall time on 2 workers.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Totals:
    """Seconds and test counts of one directory or file."""

    seconds: float = 0.0
    tests: int = 0


def file_of(classname: str) -> str:
    """The test file a JUnit ``classname`` (``tests.e2e.test_x.TestY``) comes from: the longest
    dotted prefix that is a file in the repository, else the classname as a path."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (REPO / candidate).is_file():
            return candidate.as_posix()
    return "/".join(parts) + ".py"


def read(report: Path) -> tuple[dict[str, Totals], dict[str, Totals]]:
    """Per-directory and per-file totals of one JUnit report."""
    dirs: dict[str, Totals] = defaultdict(Totals)
    files: dict[str, Totals] = defaultdict(Totals)
    for case in ET.parse(report).getroot().iter("testcase"):
        path = file_of(case.get("classname", ""))
        seconds = float(case.get("time") or 0)
        for totals in (dirs[path.rsplit("/", 1)[0]], files[path]):
            totals.seconds += seconds
            totals.tests += 1
    return dirs, files


def table(rows: dict[str, Totals], limit: int | None = None) -> list[str]:
    """A Markdown table, most expensive first."""
    ranked = sorted(rows.items(), key=lambda kv: -kv[1].seconds)
    lines = ["| path | tests | seconds |", "|---|---:|---:|"]
    lines += [f"| `{path}` | {t.tests} | {t.seconds:.0f} |" for path, t in ranked[:limit]]
    return lines


def compared(before: dict[str, Totals], after: dict[str, Totals]) -> list[str]:
    """Per path: tests and seconds in both reports, most expensive before first."""
    ranked = sorted(set(before) | set(after), key=lambda path: -before.get(path, Totals()).seconds)
    lines = ["| path | tests | before (s) | after (s) |", "|---|---:|---:|---:|"]
    for path in ranked:
        old, new = before.get(path, Totals()), after.get(path, Totals())
        lines.append(f"| `{path}` | {new.tests} | {old.seconds:.0f} | {new.seconds:.0f} |")
    old, new = sum(t.seconds for t in before.values()), sum(t.seconds for t in after.values())
    lines.append(f"| all | {sum(t.tests for t in after.values())} | {old:.0f} | {new:.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.durations", description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="JUnit XML from pytest --junitxml")
    parser.add_argument("--files", type=int, default=30, help="how many of the most expensive files to list")
    parser.add_argument("--before", type=Path, help="an earlier report: print both, per directory")
    args = parser.parse_args(argv)
    for report in (args.report, args.before):
        if report is not None and not report.is_file():
            print(f"tpuctl: error: {report} is not a file; write one with pytest --junitxml=PATH",
                  file=sys.stderr)
            return 2
    dirs, files = read(args.report)
    if args.before is not None:
        print("\n".join(compared(read(args.before)[0], dirs)))
        return 0
    total = sum(t.seconds for t in dirs.values())
    count = sum(t.tests for t in dirs.values())
    print(f"{count} tests, {total:.0f} s of worker time\n")
    print("\n".join(table(dirs)))
    print()
    print("\n".join(table(files, args.files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
