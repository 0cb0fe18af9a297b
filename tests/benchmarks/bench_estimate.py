"""How far off is ``tpuctl estimate``? A 20-step probe against the full run it predicts, on the local provider.

On a fresh ``TPUCTL_HOME`` with an on-demand local cluster (no interruptions to model): a small
BERT fine-tune (4 layers, hidden 128, sequence 64, batch 32, from scratch: heavy enough that a step
takes tens of milliseconds on a CPU) is trained for 20 steps, one step per host loop, the
supervisor looking every 0.5 s (the probe: its supervisor measures the steady rate and the
warm-up); then ``tpuctl estimate --json`` predicts the full run from that measurement alone (the
ledger), and the full run is trained. Reported: the estimate, the full run's time from its first
attempt to its end (what the estimate covers: ``training`` + ``waiting``; the staging before it is
apart), the error ``(estimate - actual) / actual``, and both runs' steady rates and warm-ups.

``python -m tests.benchmarks estimate`` runs it (about two minutes on 2 cores); ``BENCH_ESTIMATE_STEPS``
sets the full run's steps (default 300), ``BENCH_ESTIMATE_REPEAT`` how many probe/run pairs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE_STEPS = 20
SMALL = {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 512,
         "max_position_embeddings": 128}


def run() -> dict:
    steps = int(os.environ.get("BENCH_ESTIMATE_STEPS") or 300)
    repeat = int(os.environ.get("BENCH_ESTIMATE_REPEAT") or 1)
    pairs = [_pair(steps) for _ in range(repeat)]
    errors = [p["error"] for p in pairs]
    return {"probe_steps": PROBE_STEPS, "full_steps": steps, "pairs": pairs,
            "mean_abs_error": round(sum(abs(e) for e in errors) / len(errors), 4)}


def _pair(steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-estimate-") as tmp:
        root = Path(tmp)
        env = dict(os.environ, TPUCTL_HOME=str(root / "home"), TPUCTL_PROVIDER="local",
                   TPUCTL_LOCAL_TPU_CREATE_SECONDS="0.2", TPUCTL_LOCAL_VM_CREATE_SECONDS="0.1",
                   TPUCTL_LOCAL_DELETE_SECONDS="0.1", TF_CPP_MIN_LOG_LEVEL="2")
        bert = _small_bert(root / "bert", env)
        job = ["--job", "templates/bert-finetune-tiny.yaml", "--set", f"bert_dir={bert}",
               "--set", f"train_file={bert}/train.tsv", "--set", "init_checkpoint=none",
               "--set", "max_seq_length=64", "--set", "train_batch_size=32", "--set", "steps_per_execution=1",
               "--set", "save_checkpoints_steps=100"]
        _tpuctl(env, "up", "bench")
        probe = _tpuctl(env, "train", "bench", *job, "--set", f"num_train_steps={PROBE_STEPS}", "--poll", "0.5",
                        "--json")["run"]
        est = _tpuctl(env, "estimate", *job, "--set", f"num_train_steps={steps}", "--accelerator-type", "v2-8",
                      "--zone", "us-central1-b", "--on-demand", "--json")["estimates"][0]
        full = _tpuctl(env, "train", "bench", *job, "--set", f"num_train_steps={steps}", "--poll", "0.5",
                       "--json")["run"]
        _tpuctl(env, "down", "bench")
    spent = full["seconds_by_state"]
    actual = sum(float(spent.get(s) or 0.0) for s in ("training", "waiting", "making_data"))
    return {"estimate_s": est["total_s"], "speed_source": est["speed_source"], "actual_s": round(actual, 1),
            "starting_s": spent.get("starting"), "error": round((est["total_s"] - actual) / actual, 4),
            "probe": _rate(probe), "full": _rate(full), "basis": est["basis"]}


def _rate(run: dict) -> dict:
    m = (run.get("pace") or {}).get("meter") or {}
    return {"steps_per_sec": round(m["steps"] / m["seconds"], 3) if m.get("seconds") else None,
            "measured_steps": m.get("steps"), "warmups_s": m.get("warmups")}


def _small_bert(out: Path, env: dict) -> Path:
    """The tiny BERT's vocabulary and data with a bigger config and no checkpoint (trained from scratch)."""
    subprocess.run([sys.executable, "-m", "jobs.bert.tiny", str(out)], cwd=REPO, env=env, check=True,
                   capture_output=True)
    config = json.loads((out / "bert_config.json").read_text())
    (out / "bert_config.json").write_text(json.dumps({**config, **SMALL}))
    for ckpt in out.glob("bert_model.ckpt*"):
        ckpt.unlink()
    shutil.rmtree(out / "squad", ignore_errors=True)
    return out


def _tpuctl(env: dict, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "provision", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"tpuctl {' '.join(args[:2])} failed: {proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout) if "--json" in args else {}
