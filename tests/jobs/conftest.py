"""Fixtures for the job-side tests: a tiny BERT directory, spec files, and job subprocesses.

Runs that must be killed, signalled or resumed happen in subprocesses (``python -m jobs run``,
as the supervisor runs them); pure functions run in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """``python -m jobs.bert.tiny`` output, generated once per session."""
    out = tmp_path_factory.mktemp("tiny") / "bert"
    proc = subprocess.run([sys.executable, "-m", "jobs.bert.tiny", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def finetune_spec(tmp_path: Path, tiny: Path, **overrides) -> Path:
    spec = {"job": "bert-finetune", "model_dir": str(tmp_path / "run"), "bert_dir": str(tiny),
            "train_file": str(tiny / "train.tsv"), "dev_file": str(tiny / "dev.tsv"),
            "max_seq_length": 32, "train_batch_size": 16, "eval_batch_size": 16,
            "num_train_steps": 150, "learning_rate": 1e-3, "save_checkpoints_steps": 50,
            "steps_per_execution": 25}
    spec.update(overrides)
    path = tmp_path / "finetune.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def pretrain_spec(tmp_path: Path, tiny: Path, **overrides) -> Path:
    spec = {"job": "bert-pretrain", "model_dir": str(tmp_path / "pretrain"), "bert_dir": str(tiny),
            "corpus_files": str(tiny / "corpus.txt"), "max_seq_length": 64,
            "max_predictions_per_seq": 10, "dupe_factor": 3, "num_shards": 2,
            "train_batch_size": 16, "num_train_steps": 120, "learning_rate": 2e-3,
            "save_checkpoints_steps": 60, "steps_per_execution": 20}
    spec.update(overrides)
    path = tmp_path / "pretrain.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def job_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["TPUCTL_DEVICE"] = "cpu"
    env.pop("TPUCTL_CPU_REPLICAS", None)
    env.update(extra)
    return env


def run_job(spec: Path, *sets: str, env: dict | None = None, timeout: float = 180,
            via_tpuctl: bool = False) -> subprocess.CompletedProcess:
    args = ["-m", "provision", "job", "run"] if via_tpuctl else ["-m", "jobs", "run"]
    argv = [sys.executable, *args, str(spec)]
    for item in sets:
        argv += ["--set", item]
    return subprocess.run(argv, cwd=REPO, env=env or job_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def start_job(spec: Path, *sets: str, env: dict | None = None,
              via_tpuctl: bool = False) -> subprocess.Popen:
    args = ["-m", "provision", "job", "run"] if via_tpuctl else ["-m", "jobs", "run"]
    argv = [sys.executable, *args, str(spec)]
    for item in sets:
        argv += ["--set", item]
    return subprocess.Popen(argv, cwd=REPO, env=env or job_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def read_progress(model_dir: Path) -> dict | None:
    try:
        return json.loads((model_dir / "progress.json").read_text())
    except (OSError, ValueError):
        return None


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 120, what: str = "condition"):
    """Poll ``predicate()`` until truthy; fail if the process ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"job exited with {proc.returncode} before {what}:\n{out[-3000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def loss_lines(output: str) -> list[float]:
    """Losses of the host loops, from the job's ``step N/M loss X`` lines."""
    out = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) > 4 and parts[1] == "step" and parts[3] == "loss":
            out.append(float(parts[4]))
    return out


def checkpoint_steps(model_dir: Path) -> list[int]:
    return sorted(int(p.name[len("ckpt-"):-len(".index")]) for p in model_dir.glob("ckpt-*.index"))


def newest_in_state(model_dir: Path) -> int:
    """The step the ``checkpoint`` state file names as newest."""
    for line in (model_dir / "checkpoint").read_text().splitlines():
        if line.startswith("model_checkpoint_path:"):
            return int(line.split('"')[1].rsplit("-", 1)[1])
    raise AssertionError("no model_checkpoint_path in the state file")
