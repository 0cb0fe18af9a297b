"""Scaling over emulated hosts: the tiny pretraining job on 1, 2 and 4 workers joined by
``MultiWorkerMirroredStrategy`` (TF_CONFIG), as the local provider emulates a pod slice.

Weak scaling, the way a pod slice grows: the same batch per host (the global batch grows with the
hosts) and the same CPU cores per host -- each worker is pinned to its own ``cores // 4`` cores,
so 1 host and 4 hosts each get the same compute per host (without pinning, on a machine with
fewer than 4 cores, the workers share the cores and the "efficiency" measures contention). The
reference is the 1-host run, measured in the same script: scaling efficiency at H hosts is
``examples/s(H) / (H x examples/s(1))``, 1.0 being perfect.

On a machine with fewer than 4 cores the hosts share the cores the 1-host run had to itself,
so H hosts can at best match its examples/s (efficiency 1/H); the report then also gives the
ceiling and the fraction of it reached.

With NVIDIA GPUs visible, the same is measured across GPUs, one GPU per worker (NCCL), for as
many hosts as there are GPUs.

``python -m tests.benchmarks multihost``; ``BENCH_MULTIHOST_BATCH`` (per host, default 64),
``BENCH_MULTIHOST_STEPS`` (default 60), ``BENCH_MULTIHOST_HOSTS`` (default 1,2,4).
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_RATE = re.compile(r"step (\d+)/\d+ loss \S+ ([\d.]+) examples/s")


def _ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _measure(tiny: Path, work: Path, hosts: int, batch: int, steps: int, cores: list[list[int]] | None,
             gpu: bool) -> dict:
    ports = _ports(hosts)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    model_dir = work / f"{'gpu' if gpu else 'cpu'}-{hosts}"
    procs = []
    for i in range(hosts):
        env = dict(os.environ, TPUCTL_DEVICE="gpu" if gpu else "cpu")
        if hosts > 1:
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        if gpu:
            env["CUDA_VISIBLE_DEVICES"] = str(i)
        mine = cores[i] if cores else None
        argv = [sys.executable, "-m", "jobs", "run", "templates/bert-pretrain-tiny.yaml",
                "--set", f"bert_dir={tiny}", "--set", f"corpus_files={tiny}/corpus.txt",
                "--set", f"model_dir={model_dir}", "--set", f"train_batch_size={batch * hosts}",
                "--set", f"eval_batch_size={batch * hosts}", "--set", "max_eval_steps=1",
                "--set", f"num_train_steps={steps}", "--set", "steps_per_execution=10",
                "--set", f"save_checkpoints_steps={steps}", "--set", "export_bert_dir=false"]
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        if mine:  # before TensorFlow starts its thread pools (seconds away), which inherit it
            os.sched_setaffinity(proc.pid, mine)
        procs.append(proc)
    started = time.perf_counter()
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{hosts} host(s) failed: {outs[0][-1500:]}")
    rates = [float(m.group(2)) for m in _RATE.finditer(outs[0]) if int(m.group(1)) > 20]  # past compile
    return {"examples_per_s": round(statistics.median(rates), 1), "global_batch": batch * hosts,
            "wall_s": round(time.perf_counter() - started, 1)}


def run() -> dict:
    """The workers' gRPC servers listen on every interface: measured in a private network."""
    from tests.benchmarks.private_network import run_isolated

    return run_isolated("tests.benchmarks.bench_multihost", "measure")


def measure() -> dict:
    batch = int(os.environ.get("BENCH_MULTIHOST_BATCH", "64"))
    steps = int(os.environ.get("BENCH_MULTIHOST_STEPS", "60"))
    wanted = [int(h) for h in os.environ.get("BENCH_MULTIHOST_HOSTS", "1,2,4").split(",")]
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    per_host = len(available) // max(wanted)
    cores = ([available[i * per_host:(i + 1) * per_host] for i in range(max(wanted))]
             if per_host >= 1 else None)
    report: dict = {"per_host_batch": batch, "steps": steps,
                    "cores_per_host": per_host if cores else f"shared ({len(available)} cores)"}
    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-multihost-") as tmp:
        tiny = Path(tmp) / "tiny"
        subprocess.run([sys.executable, "-m", "jobs.bert.tiny", str(tiny)], check=True, capture_output=True,
                       cwd=REPO)
        runs = {"cpu": wanted}
        gpus = _gpus()
        if gpus:
            runs["gpu"] = [h for h in wanted if h <= gpus]
        for kind, counts in runs.items():
            measured = {h: _measure(tiny, Path(tmp), h, batch, steps, None if kind == "gpu" else cores,
                                    kind == "gpu") for h in counts}
            base = measured[counts[0]]["examples_per_s"] / counts[0]
            report[kind] = {
                "hosts": {str(h): m for h, m in measured.items()},
                "scaling_efficiency": {str(h): round(m["examples_per_s"] / (h * base), 3)
                                       for h, m in measured.items() if h != counts[0]},
            }
            if kind == "gpu":
                report[kind]["gpus"] = gpus
            elif not cores:
                # the hosts share the cores the 1-host run had to itself: H hosts can at best
                # match its examples/s, so 1/H is the ceiling and the ratio to it what is lost
                # to the all-reduce and the extra processes
                report[kind]["ceiling_with_shared_cores"] = {str(h): round(1 / h, 3) for h in counts[1:]}
                report[kind]["fraction_of_ceiling"] = {
                    h: round(e * int(h), 3) for h, e in report[kind]["scaling_efficiency"].items()}
    return report
