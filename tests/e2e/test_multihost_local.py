"""A multi-host TPU VM slice, emulated on the local provider: `up --accelerator-type v2-32` gives a
"TPU" of 4 hosts (4 processes here, joined by MultiWorkerMirroredStrategy through TF_CONFIG), and
the tiny pretraining spec trained on it, preempted mid-run, ends with the weights of the same spec
trained on one host up to float noise: every loss is a mean over the global batch, so the
gradient does not depend on the number of replicas (1/100 of another seed's distance at most).
Its eval_batch_size is the default 8, which 32 cores cannot split: the job pads it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.benchmarks.bench_topology import distance, final_weights
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

# make test-long: make test trains emulated slices in tests/chaos/test_slices_chaos.py (bitwise across
# kills and restarts) and 1 vs 4 replicas in tests/jobs/test_topology.py
pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.long, pytest.mark.xdist_group("tf-e2e")]

STEPS = 30


def _spec(tiny: Path, *extra: str) -> list[str]:
    sets = {"bert_dir": tiny, "corpus_files": f"{tiny}/corpus.txt", "num_train_steps": STEPS,
            "train_batch_size": 32, "max_eval_steps": 1,
            "save_checkpoints_steps": 10, "steps_per_execution": 5}
    args = ["templates/bert-pretrain-tiny.yaml"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args + list(extra)


def _progress(model_dir: Path) -> dict:
    try:
        return json.loads((model_dir / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def test_an_emulated_v2_32_trains_on_four_hosts_survives_a_preemption_and_matches_one_host(
        tiny_bert, isolated_env, tmp_path):
    home = Path(os.environ["TPUCTL_HOME"])
    env = {"TPUCTL_HEARTBEAT_SECONDS": "1"}
    assert run_tpuctl_process("up", "pod", "--accelerator-type", "v2-32", "--preemptible").code == 0
    tpu = run_tpuctl_process("status", "pod", "--json").json()["clusters"][0]["tpu"]
    assert tpu["accelerator_type"] == "v2-32" and tpu["hosts"] == 4

    # a global batch the slice's 32 cores cannot split is refused before a run exists
    spec = _spec(tiny_bert)
    bad = run_tpuctl_process("train", "pod", "--job", *spec, "--set", "train_batch_size=16")
    assert bad.code == 2
    assert "train_batch_size 16 does not divide over the 32 cores of a v2-32 (4 hosts)" in bad.err
    assert not (home / "runs").exists() or not list((home / "runs").glob("*.json"))

    proc = subprocess.Popen([str(TPUCTL_BIN), "train", "pod", "--job", *spec, "--poll", "1", "--json"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    model_dir = None
    deadline = time.time() + 300
    preempted = False
    while proc.poll() is None and time.time() < deadline and not preempted:
        time.sleep(0.3)
        runs = sorted((home / "runs").glob("*.json")) if (home / "runs").is_dir() else []
        if model_dir is None and runs:
            run_id = json.loads(runs[-1].read_text())["run_id"]
            model_dir = home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id / "model"
        p = _progress(model_dir) if model_dir else {}
        if (p.get("checkpoint_step") or 0) >= 10 and (p.get("step") or 0) < STEPS:
            assert run_tpuctl_process("simulate", "preempt", "pod", "--no-notice").code == 0   # the slice lost at once
            preempted = True
    out, err = proc.communicate(timeout=300)
    assert preempted, err[-3000:]
    result = json.loads(out)["run"]
    assert result["status"] == "finished" and result["last_progress"]["step"] == STEPS, err[-3000:]
    assert result["preemptions"] == 1 and result["attempts"] == 2
    events = run_tpuctl_process("logs", result["run_id"], "--events").out
    assert "resumed" in events and "preempted" in events

    # every host ran the job (4 processes joined over TF_CONFIG); logs --worker shows one of them
    one = run_tpuctl_process("logs", result["run_id"], "--worker", "2", "--attempt", "2")
    assert one.code == 0 and "(worker 2)" in one.out and "(worker 0)" not in one.out
    assert "CPU x 4 workers: 4 replica(s)" in one.out
    # the chief alone writes model_dir; the others' scratch copies never shadow its checkpoints
    assert (model_dir / f"ckpt-{STEPS}.index").exists() and (model_dir / "export" / "bert_config.json").exists()

    # the same spec on one host, and with another seed, through the job runner directly (both at once)
    singles = {}
    for name, extra in (("one-host", ()), ("other-seed", ("--set", "seed=7"))):
        with open(tmp_path / f"{name}.log", "w") as log:
            singles[name] = subprocess.Popen(
                [str(TPUCTL_BIN), "job", "run", *spec, "--set", f"model_dir={tmp_path / name}", *extra],
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "TPUCTL_DEVICE": "cpu"})
    for name, proc in singles.items():
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    one = final_weights(tmp_path / "one-host")
    same = distance(one, final_weights(model_dir))
    other = distance(one, final_weights(tmp_path / "other-seed"))
    # per variable (those the loss has a gradient for) and over all of them
    assert same["max"] < other["max"] / 100 and same["all"] < other["all"] / 100, (same, other)
