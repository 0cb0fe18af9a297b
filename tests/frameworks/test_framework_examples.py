"""examples/jax and examples/pytorch as a user runs them (docs/own-code.md): `tpuctl train` on the
local provider, preempted once mid-run (the TPU lost under the program: no notice), resumed
from the program's own checkpoint, and ending with the parameters of an uninterrupted run of
the same program. The JAX loop runs on an emulated two-host v4-16 (`hosts: all`): both workers
join through `jax.distributed.initialize` at the coordinator tpuctl gives them."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]


def _model_dir() -> Path | None:
    home = Path(os.environ["TPUCTL_HOME"])
    runs = sorted((home / "runs").glob("*.json")) if (home / "runs").is_dir() else []
    if not runs:
        return None
    run_id = json.loads(runs[-1].read_text())["run_id"]
    return home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id / "model"


STEPS = 3000


def _load(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        return dict(np.load(path))
    import torch

    saved = torch.load(io.BytesIO(path.read_bytes()))
    return {k: v.numpy() for k, v in saved["model"].items()} | {"step": np.array(saved["step"])}


@pytest.mark.parametrize("name, cluster, accelerator, ckpt", [
    ("jax", "jx", "v4-16", "checkpoint.npz"), ("pytorch", "pt", "v2-8", "checkpoint.pt")])
def test_the_example_resumes_from_its_own_checkpoint_after_a_preemption_to_the_uninterrupted_result(
        tmp_path, name, cluster, accelerator, ckpt):
    work = tmp_path / name
    shutil.copytree(REPO / "examples" / name, work, ignore=shutil.ignore_patterns("__pycache__"))
    spec = work / "spec.yaml"            # long enough to be preempted halfway
    spec.write_text(spec.read_text().replace('"300"', f'"{STEPS}"').replace(": 300", f": {STEPS}"))
    straight = tmp_path / "straight"
    subprocess.run([sys.executable, "train.py", "--steps", str(STEPS), "--lr", "0.1"], cwd=work, check=True,
                   env={**os.environ, "TPUCTL_MODEL_DIR": str(straight)})
    up = ["up", cluster, "--accelerator-type", accelerator, "--preemptible"]
    if accelerator.startswith("v4"):
        up += ["--zone", "us-central2-b"]
    assert run_tpuctl_process(*up).code == 0
    proc = subprocess.Popen([str(TPUCTL_BIN), "train", cluster, "--job", str(work / "spec.yaml"), "--poll", "1",
                             "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, preempted = time.time() + 300, False
    while proc.poll() is None and time.time() < deadline and not preempted:
        time.sleep(0.2)
        model = _model_dir()
        if model is not None and (model / ckpt).exists():     # its first checkpoint: preempt it now
            preempted = run_tpuctl_process("simulate", "preempt", cluster).code == 0
    out, err = proc.communicate(timeout=300)
    assert preempted, err[-3000:]
    run = json.loads(out)["run"]
    assert (run["status"], run["preemptions"], run["attempts"]) == ("finished", 1, 2), err[-3000:]
    assert run["last_progress"]["step"] == STEPS and "eval_loss" in run["last_progress"]["metrics"]
    resumed, uninterrupted = _load(Path(run["model_dir"]) / ckpt), _load(straight / ckpt)
    assert sorted(resumed) == sorted(uninterrupted)
    assert [k for k in resumed if not np.array_equal(resumed[k], uninterrupted[k])] == []
