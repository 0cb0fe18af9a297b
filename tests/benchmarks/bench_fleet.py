"""tpuctl on a fleet: wall time, API requests and bytes downloaded per command at N clusters.

A fleet of N clusters (host VM + TPU VM each, over five zones in three regions, with the metadata
``up`` writes; tests/fleet.py) is put straight into the fake cloud, and the installed ``tpuctl``
runs, as a user would: ``status``, ``status --json``, ``status NAME``, ``cost``, ``cost --since 7d``
(the fleet's goodput, from one listing of the bucket's run records), ``down --idle
--all-zones --dry-run`` and ``up`` of one more cluster. The fake counts each command's API calls
and the response bytes it sent (``/_admin/calls``; Cloud Storage reads of run records go to
fake-gcs-server and are not counted). Every command is timed with the fake's latencies near zero
and again with 100 ms added to every API call (``request`` latency), the second column.

``BENCH_FLEET_SIZES`` (default ``1,200,2000``) picks N, ``BENCH_FLEET_ROUNDS`` (default 3) the
runs per measure (the median is reported), ``BENCH_FLEET_KIND`` the fleet: ``tpu`` (default: Cloud
TPU API nodes) or ``compute`` (TPUs on Compute Engine, as ``up --api compute`` makes them: TPU VM
instances, and every tenth cluster a slice, a MIG, alternately spot and flex-start;
tests/fleet_compute.py). The goals of the fleet issue are checked at the
largest N and each printed PASS or FAIL; a miss does not fail the benchmark, the report says it.
docs/scale.md has the tables.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests import fleet, fleet_compute
from tests.benchmarks.bench_status import tpuctl_bin, tpuctl_env
from tests.fakegcp.fixture import FakeGCP
from tests.gcs_fixture import FakeGcs

SIZES = tuple(int(x) for x in os.environ.get("BENCH_FLEET_SIZES", "1,200,2000").split(",") if x.strip())
ROUNDS = int(os.environ.get("BENCH_FLEET_ROUNDS", "3"))
KIND = os.environ.get("BENCH_FLEET_KIND", "tpu")
LATENCY_S = 0.1
GOAL_N = 2000
# creations as fast as the fake goes: `up` measures tpuctl's own reads and calls, not Google's waits
FAST = {"vm_create": 0.05, "tpu_create": 0.05, "vm_delete": 0.05, "tpu_delete": 0.05, "address_create": 0.0}


@dataclass(frozen=True)
class Command:
    key: str
    argv: tuple[str, ...]


def commands(n: int, kind: str = KIND) -> list[Command]:
    named = fleet.member(min(7, n - 1), 0.0).name
    if kind == "compute":
        up = ("up", "{new}", "--zone", fleet_compute.ZONES[0], "--api", "compute", "--accelerator-type",
              fleet_compute.SINGLE[fleet_compute.ZONES[0]], "--spot")
    else:
        up = ("up", "{new}", "--zone", fleet.ZONES[0], "--arch", "vm", "--accelerator-type", fleet.ACCELERATOR,
              "--preemptible")
    return [Command("status", ("status",)), Command("status --json", ("status", "--json")),
            Command("status NAME", ("status", named)), Command("cost", ("cost",)),
            Command("cost --since 7d", ("cost", "--since", "7d")),
            Command("down --idle", ("down", "--idle", "--all-zones", "--dry-run")), Command("up", up)]


# (command, measure, limit at GOAL_N): the goals on this machine against the fake
GOALS = (("status", "seconds", 1.5), ("status", "requests", 10), ("status --json", "seconds", 1.5),
         ("status --json", "requests", 10), ("cost", "seconds", 1.5), ("cost", "requests", 10),
         ("cost --since 7d", "seconds", 1.5), ("cost --since 7d", "requests", 10),
         ("down --idle", "seconds", 1.5), ("down --idle", "requests", 10), ("status NAME", "seconds", 0.6),
         ("status NAME", "bytes", 1_000_000), ("down --idle", "seconds_100ms", 3.0))


def _run(fake: FakeGCP, env: dict[str, str], argv: list[str]) -> tuple[float, int, int]:
    fake.clear_calls()
    start = time.perf_counter()
    proc = subprocess.run([tpuctl_bin(), *argv], env=env, capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"tpuctl {' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-600:]}")
    requests, size = fake.traffic()
    return elapsed, requests, size


def measure(n: int) -> dict[str, dict[str, float]]:
    """Every command on a fleet of ``n``: median seconds (fast and +100 ms), requests, bytes."""
    out: dict[str, dict[str, float]] = {}
    with FakeGCP() as fake, tempfile.TemporaryDirectory() as tmp:
        gcs = FakeGcs().start()
        try:
            fake.set_latencies(**FAST)
            start = time.perf_counter()
            if KIND == "compute":
                fleet_compute.build(fake, gcs.url, Path(tmp) / "home", n)
                fake.set_latencies(**FAST)
            else:
                fleet.build(fake, gcs.url, Path(tmp) / "home", n)
            built = time.perf_counter() - start
            env = {**tpuctl_env(fake, tmp), **gcs.env()}
            _run(fake, env, ["status", "--json"])       # warm-up: bytecode, page cache, the price cache
            made = 0
            for cmd in commands(n):
                row: dict[str, list[float]] = {"seconds": [], "seconds_100ms": [], "requests": [], "bytes": []}
                for latency in (0.0, LATENCY_S):
                    fake.set_latencies(request=latency)
                    for _ in range(ROUNDS):
                        argv = [a.replace("{new}", f"fleet-new-{made}") for a in cmd.argv]
                        made += cmd.key == "up"
                        seconds, requests, size = _run(fake, env, argv)
                        if latency:
                            row["seconds_100ms"].append(seconds)
                        else:
                            row["seconds"].append(seconds)
                            row["requests"].append(requests)
                            row["bytes"].append(size)
                fake.set_latencies(request=0.0)
                out[cmd.key] = {k: statistics.median(v) for k, v in row.items()}
            out["_fleet"] = {"build_s": built}
        finally:
            gcs.stop()
    return out


def table(results: dict[int, dict[str, dict[str, float]]]) -> str:
    lines = ["| command | N | seconds | requests | MB down | seconds, +100 ms/call |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for cmd in commands(1):
        for n, res in results.items():
            r = res[cmd.key]
            lines.append(f"| `{cmd.key}` | {n:,} | {r['seconds']:.2f} | {r['requests']:.0f} | "
                         f"{r['bytes'] / 1e6:.2f} | {r['seconds_100ms']:.2f} |")
    return "\n".join(lines)


def goals(results: dict[int, dict[str, dict[str, float]]]) -> list[dict[str, object]]:
    n = GOAL_N if GOAL_N in results else max(results)
    out = []
    for key, what, limit in GOALS:
        value = results[n][key][what]
        out.append({"command": key, "measure": what, "n": n, "value": round(value, 3), "limit": limit,
                    "pass": value <= limit})
    return out


def run() -> dict:
    results = {n: measure(n) for n in SIZES}
    checked = goals(results)
    print(table(results), file=sys.stderr)
    for g in checked:
        print(f"{'PASS' if g['pass'] else 'FAIL'}  {g['command']} {g['measure']} at N={g['n']}: "
              f"{g['value']} (goal <= {g['limit']})", file=sys.stderr)
    return {"kind": KIND, "sizes": list(SIZES), "rounds": ROUNDS, "latency_added_s": LATENCY_S,
            "results": {str(n): {k: {m: round(v, 3) for m, v in r.items()} for k, r in res.items()}
                        for n, res in results.items()},
            "goals": checked, "goals_met": all(g["pass"] for g in checked), "table": table(results)}
