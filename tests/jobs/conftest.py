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
TEMPLATES = REPO / "templates"


@pytest.fixture(scope="session")
def tiny_dir(tiny_bert) -> Path:
    """``python -m jobs.bert.tiny`` output: the session's one copy (tests/conftest.py)."""
    return tiny_bert


def _from_template(name: str, path: Path, values: dict) -> Path:
    """A spec file: the template's keys with ``values`` filled in (what the demo passes)."""
    spec = yaml.safe_load((TEMPLATES / name).read_text())
    spec.update(values)
    path.write_text(yaml.safe_dump(spec))
    return path


def finetune_spec(tmp_path: Path, tiny: Path, **overrides) -> Path:
    """templates/bert-finetune-tiny.yaml on the tiny directory (300 steps by default)."""
    return _from_template("bert-finetune-tiny.yaml", tmp_path / "finetune.yaml", {
        "model_dir": str(tmp_path / "run"), "bert_dir": str(tiny),
        "train_file": str(tiny / "train.tsv"), "dev_file": str(tiny / "dev.tsv"), **overrides})


def pretrain_spec(tmp_path: Path, tiny: Path, **overrides) -> Path:
    """templates/bert-pretrain-tiny.yaml on the tiny corpus, 120 steps in loops of 20."""
    return _from_template("bert-pretrain-tiny.yaml", tmp_path / "pretrain.yaml", {
        "model_dir": str(tmp_path / "pretrain"), "bert_dir": str(tiny),
        "corpus_files": str(tiny / "corpus.txt"), "num_train_steps": 120,
        "save_checkpoints_steps": 60, "steps_per_execution": 20, **overrides})


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


@pytest.fixture
def job_here(monkeypatch, capfd):
    """Run a spec through ``python -m jobs``'s ``main()`` in this worker's process: TensorFlow
    starts once per worker, not once per job. For tests of what one job does on one replica (its
    exit code, lines, outputs); runs that are killed, signalled, resumed or split over logical
    replicas (set once per process) stay subprocesses (``run_job``, ``start_job``)."""
    from jobs.__main__ import main

    monkeypatch.chdir(REPO)
    # as job_env(): with TF_CPP_MIN_LOG_LEVEL set, main() leaves stderr unfiltered (jobs.quiet)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    monkeypatch.setenv("TPUCTL_DEVICE", "cpu")
    monkeypatch.delenv("TPUCTL_CPU_REPLICAS", raising=False)

    def run(spec: Path, *sets: str) -> subprocess.CompletedProcess:
        argv = ["run", str(spec)]
        for item in sets:
            argv += ["--set", item]
        capfd.readouterr()
        try:
            code = main(argv)
        finally:
            _reset_keras()
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess([sys.executable, "-m", "jobs", *argv], code, out, err)

    return run


def _reset_keras() -> None:
    """What a job leaves in the process for the next one: Keras' layer names and dtype policy."""
    if "keras" in sys.modules:
        import keras

        keras.backend.clear_session()
        keras.mixed_precision.set_global_policy("float32")


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
