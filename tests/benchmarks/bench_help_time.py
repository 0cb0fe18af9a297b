"""`tpuctl --help` wall time: must stay under 0.25 s on a 2-core machine (lazy imports).

Reference, side by side: a bare `python -c pass` start, so the report separates tpuctl's own
import cost from the interpreter's.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

RUNS = 15
BUDGET_S = 0.25


def _time(argv: list[str]) -> list[float]:
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return samples


def run() -> dict:
    exe = shutil.which("tpuctl") or str(__import__("pathlib").Path(sys.executable).with_name("tpuctl"))
    help_s = _time([exe, "--help"])
    up_help_s = _time([exe, "up", "--help"])
    bare_s = _time([sys.executable, "-c", "pass"])
    median = statistics.median(help_s)
    return {
        "tpuctl_help_median_s": round(median, 4),
        "tpuctl_help_p90_s": round(sorted(help_s)[int(0.9 * RUNS) - 1], 4),
        "tpuctl_up_help_median_s": round(statistics.median(up_help_s), 4),
        "python_bare_start_median_s": round(statistics.median(bare_s), 4),
        "tpuctl_own_import_s": round(median - statistics.median(bare_s), 4),
        "budget_s": BUDGET_S,
        "within_budget": median < BUDGET_S,
        "runs": RUNS,
    }
