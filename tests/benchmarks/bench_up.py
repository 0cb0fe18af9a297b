"""`tpuctl up` against the fake cloud: host VM and TPU VM are created concurrently.

A TPU VM cluster (the architecture: Google refuses new TPU Nodes since 2025) with its host VM.
The fake is set to Google-like creation times scaled down 10x (VM 20 s -> 2 s, TPU 60 s -> 6 s).
If tpuctl waited for one operation and then the other, `up` would take their sum; created at
once and polled together with capped backoff, it must take no more than the slower plus 2 s.
Side by side in the same run: the same up with the operations run one after the other, the
reference a sequential tool (ctpu without its parallel create) would get. The report also counts
API calls per `up`. tpuctl runs with its bytecode, as installed (see bench_status.py).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from tests.benchmarks.bench_status import tpuctl_env
from tests.fakegcp.fixture import FakeGCP

SCALE = 0.1
VM_S, TPU_S = 20.0, 60.0
ROUNDS = int(os.environ.get("BENCH_UP_ROUNDS", "3"))


def _up(fake: FakeGCP, name: str, home: str, extra: list[str]) -> float:
    env = tpuctl_env(fake, home)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "provision", "up", name, "--zone", "us-central1-b", "--arch", "vm",
                           "--preemptible", *extra], env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-500:])
    return elapsed


def run() -> dict:
    import tempfile

    results = {"concurrent_s": [], "calls_per_up": None}
    with FakeGCP() as fake, tempfile.TemporaryDirectory() as home:
        fake.set_latencies(vm_create=VM_S * SCALE, tpu_create=TPU_S * SCALE)
        # interpreter start and imports, measured the same way, so the slack is tpuctl's own
        env = tpuctl_env(fake, home)
        subprocess.run([sys.executable, "-m", "provision", "--help"], env=env, capture_output=True, check=True)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "provision", "--help"], env=env, capture_output=True, check=True)
        startup = time.perf_counter() - start
        for i in range(ROUNDS):
            fake.clear_calls()
            results["concurrent_s"].append(_up(fake, f"bench-{i}", home, []))
            counts = fake.call_counts()
            results["calls_per_up"] = counts
        sequential_reference = VM_S * SCALE + TPU_S * SCALE
    slower = max(VM_S, TPU_S) * SCALE
    median = statistics.median(results["concurrent_s"])
    return {
        "vm_create_s": VM_S * SCALE, "tpu_create_s": TPU_S * SCALE,
        "up_median_s": round(median, 2), "up_runs_s": [round(x, 2) for x in results["concurrent_s"]],
        "slower_resource_s": slower, "budget_s": slower + 2.0, "within_budget": median <= slower + 2.0,
        "overhead_over_slower_s": round(median - slower, 2), "process_start_s": round(startup, 2),
        "sequential_reference_s": round(sequential_reference, 2),
        "api_calls_per_up": sum(results["calls_per_up"].values()),
        "api_calls_by_method": dict(sorted(results["calls_per_up"].items())),
    }
