"""The runner on Keras 3's JAX backend (jobs/runner/jax) on a job of the public API that is not
BERT: exact resumption after SIGTERM and SIGKILL, and checkpoints under the TensorFlow runner's
keys. (Several devices and processes against one: tests/jobs/test_bert_jax.py and
tests/jobs/test_keras_backends.py.)

The job is tests/jobs/jax_runner_job.py (the public job API, dropout keyed by the runner's step
seed, a momentum optimizer with slots), each run a program of its own: Keras chooses its
backend once per process. JAX on the CPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "jobs" / "jax_runner_job.py"

pytestmark = pytest.mark.filterwarnings("ignore")


def env(devices: int = 1, **extra: str) -> dict:
    out = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2",
               JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    out.pop("TF_CONFIG", None)
    out.update(extra)
    return out


def start(model_dir: Path, steps: int, *args: str, devices: int = 1, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(JOB), str(model_dir), str(steps), *args],
                            env=env(devices, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def run(model_dir: Path, steps: int, *args: str, devices: int = 1) -> str:
    proc = start(model_dir, steps, *args, devices=devices)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    return out


def weights(model_dir: Path) -> dict[str, np.ndarray]:
    with np.load(model_dir / "weights.npz") as data:
        return {k: data[k] for k in data.files}


def progress_step(model_dir: Path) -> int:
    try:
        return int(json.loads((model_dir / "progress.json").read_text()).get("step") or 0)
    except (OSError, ValueError):
        return 0


def stop_at(proc: subprocess.Popen, model_dir: Path, step: int, sig: int) -> str:
    deadline = time.monotonic() + 240
    while progress_step(model_dir) < step:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)
    proc.send_signal(sig)
    return proc.communicate(timeout=120)[0]


def test_a_run_stopped_by_sigterm_and_by_sigkill_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    whole = tmp_path / "whole"
    out = run(whole, 40, "loop=1")
    assert "on CPU: 1 replica(s), float32, XLA, jax" in out

    resumed = tmp_path / "resumed"
    out = stop_at(start(resumed, 40, "loop=1"), resumed, 12, signal.SIGTERM)
    assert "checkpoint at step" in out and "exit 42" in out
    stopped = progress_step(resumed)
    assert 12 <= stopped < 40
    killed = stop_at(start(resumed, 40, "loop=1"), resumed, stopped + 6, signal.SIGKILL)
    assert f"resumed from {resumed}/ckpt-{stopped} (step {stopped})" in killed
    out = run(resumed, 40, "loop=1")
    assert "resumed from" in out and "finished at step 40" in out

    a, b = weights(whole), weights(resumed)
    assert sorted(a) == sorted(b) and a
    for name in a:
        assert np.array_equal(a[name], b[name]), name  # bitwise


def test_a_jax_checkpoint_holds_the_tensorflow_runners_keys(tmp_path):
    model_dir = tmp_path / "run"
    run(model_dir, 5, "save=5")
    check = subprocess.run(
        [sys.executable, "-c", ("import sys, tensorflow as tf; "
         "print('\\n'.join(n for n, _ in tf.train.list_variables(sys.argv[1])))"),
         str(model_dir / "ckpt-5")], env=env(), capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stderr[-2000:]
    names = set(check.stdout.split())
    assert {"global_step/.ATTRIBUTES/VARIABLE_VALUE",
            "input_position/.ATTRIBUTES/VARIABLE_VALUE"} <= names
    assert any(n.startswith("model/hidden") and n.endswith("kernel/.ATTRIBUTES/VARIABLE_VALUE")
               for n in names), names
    assert any("momentum" in n and n.startswith("optimizer/") for n in names), names
