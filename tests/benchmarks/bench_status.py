"""`tpuctl status NAME --provider gcp` next to `gcloud compute tpus tpu-vm describe NAME`, same endpoint.

Both talk to the fake cloud on loopback (gcloud through `api_endpoint_overrides`, the way
docs/fakegcp.md sets it up), so what is compared is each tool's own start-up and work: the
interpreter, the imports, the calls. tpuctl's answer is the larger one (the cluster's host VM
and TPU VM, with state, range and price) but must come in at most 0.6x gcloud's time for its
TPU alone, so that status is the quicker way to look. The two are run alternately, so a busy
machine slows both alike.

A second row does the same for a cluster whose TPU is on Compute Engine (a single-host Spot TPU
VM and its host VM: the road `up` takes where the zone sells the type there), next to `gcloud
compute instances describe` of its TPU VM, the describe gcloud has for it; its keys start with
``compute_``. The same budget holds for both.

Without gcloud on PATH the report gives tpuctl's times alone and says so.

Both run with their bytecode: gcloud ships its own, and an installed tpuctl has its own (pip
compiles a wheel at install; an editable install writes it on first run). An environment that
forbids writing bytecode (PYTHONDONTWRITEBYTECODE) would make every tpuctl run compile its
modules again, so it is lifted for tpuctl here and the first (warm-up) run writes it.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fakegcp.fixture import FakeGCP

ROUNDS = int(os.environ.get("BENCH_STATUS_ROUNDS", "5"))
BUDGET_RATIO = 0.6
NAME, ZONE = "bert", "us-central1-b"
CE_NAME, CE_ZONE, CE_TYPE = "ce", "us-east5-a", "v6e-8"     # the fake sells ct6e there (tests/fakegcp/catalog.py)


def tpuctl_env(fake: FakeGCP, home: str) -> dict[str, str]:
    """A tpuctl user's environment against the fake: its own home and config, bytecode allowed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(fake.env())
    env.update({"TPUCTL_HOME": f"{home}/home", "TPUCTL_CONFIG": f"{home}/config.toml",
                "CLOUDSDK_CONFIG": f"{home}/gcloud-tpuctl"})
    return env


def tpuctl_bin() -> str:
    return shutil.which("tpuctl", path=str(Path(sys.executable).parent)) or shutil.which("tpuctl") or "tpuctl"


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} failed ({proc.returncode}): {proc.stderr[-600:]}")
    return elapsed


def _up(env: dict[str, str], *args: str) -> None:
    up = subprocess.run([tpuctl_bin(), "up", *args], env=env, capture_output=True, text=True, timeout=300, check=False)
    if up.returncode != 0:
        raise RuntimeError(f"tpuctl up failed: {up.stderr[-600:]}")


def _side_by_side(fake: FakeGCP, status: list[str], env: dict[str, str], describe: list[str] | None,
                  genv: dict[str, str]) -> dict:
    """``status`` and ``describe`` (None: no gcloud) run alternately, ROUNDS times each after a
    warm-up of each; their medians, runs, requests and ratio."""
    _timed(status, env)                       # warm-up: bytecode, page cache
    if describe:
        _timed(describe, genv)
    ours, theirs = [], []
    ours_calls: dict[str, int] = {}
    theirs_calls: dict[str, int] = {}
    for _ in range(ROUNDS):
        fake.clear_calls()
        ours.append(_timed(status, env))
        ours_calls = fake.call_counts()
        if describe:
            fake.clear_calls()
            theirs.append(_timed(describe, genv))
            theirs_calls = fake.call_counts()
    out: dict = {
        "tpuctl_status_median_s": round(statistics.median(ours), 3),
        "tpuctl_status_runs_s": [round(x, 3) for x in ours],
        "tpuctl_api_calls": dict(sorted(ours_calls.items())),
    }
    if not describe:
        return out
    median = statistics.median(theirs)
    ratio = statistics.median(ours) / median
    out.update({
        "gcloud_describe_median_s": round(median, 3),
        "gcloud_describe_runs_s": [round(x, 3) for x in theirs],
        "gcloud_api_calls": dict(sorted(theirs_calls.items())),
        "ratio_tpuctl_over_gcloud": round(ratio, 3),
        "within_budget": ratio <= BUDGET_RATIO,
    })
    return out


def run() -> dict:
    gcloud = shutil.which("gcloud")
    with FakeGCP() as fake, tempfile.TemporaryDirectory() as home:
        env = tpuctl_env(fake, home)
        _up(env, NAME, "--zone", ZONE, "--arch", "vm", "--preemptible")
        _up(env, CE_NAME, "--zone", CE_ZONE, "-a", CE_TYPE, "--spot", "--api", "compute")
        genv = {**os.environ, **fake.gcloud_config(f"{home}/gcloud")}
        tpu_api = _side_by_side(
            fake, [tpuctl_bin(), "status", NAME, "--provider", "gcp"], env,
            [gcloud, "compute", "tpus", "tpu-vm", "describe", NAME, "--zone", ZONE] if gcloud else None, genv)
        compute = _side_by_side(
            fake, [tpuctl_bin(), "status", CE_NAME, "--provider", "gcp"], env,
            [gcloud, "compute", "instances", "describe", f"{CE_NAME}-tpu", "--zone", CE_ZONE] if gcloud else None,
            genv)
    report: dict = {"rounds": ROUNDS, "budget_ratio": BUDGET_RATIO, **tpu_api,
                    **{f"compute_{k}": v for k, v in compute.items()}}
    if not gcloud:
        report["gcloud"] = "not installed: no side-by-side reference"
    return report
