"""``make bench``: run every tests/benchmarks/bench_*.py and print one JSON report.

Each module exposes ``run() -> dict`` and measures what it reports against a reference run side
by side in the same process or script. ``python -m tests.benchmarks help_time stage`` runs a subset.
"""

from __future__ import annotations

import importlib
import json
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    names = [p.stem[len("bench_"):] for p in sorted(HERE.glob("bench_*.py"))]
    wanted = argv or names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(names)}", file=sys.stderr)
        return 2
    report = {"machine": {"python": platform.python_version(), "platform": platform.platform(),
                          "cpus": _cpus()}, "benchmarks": {}}
    failed = False
    for name in wanted:
        print(f"bench {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            module = importlib.import_module(f"tests.benchmarks.bench_{name}")
            result = module.run()
            result["wall_s"] = round(time.perf_counter() - start, 2)
        except Exception as exc:  # noqa: BLE001 - report and keep going: one broken benchmark must not hide the rest
            failed = True
            result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=5)}
        report["benchmarks"][name] = result
    print(json.dumps(report, indent=2, sort_keys=True))
    return 1 if failed else 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
