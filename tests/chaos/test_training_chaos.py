"""Chaos for training, on the local provider with a real tiny BERT.

Per seed: preemptions at random steps and at checkpoint boundaries (the job is killed while it
saves), and the supervising `tpuctl train` itself killed at a random moment, then picked up again
with `tpuctl train --attach`. Invariants: the run ends at num_train_steps (or says exactly why
not), and no checkpoint that was complete before a preemption is ever lost: every resume starts
at or after the newest checkpoint the job had reported done.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_tpuctl_process

pytestmark = [pytest.mark.tf, pytest.mark.xdist_group("tf")]

STEPS, CKPT = 300, 50


def _progress(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _train(tiny: Path, model: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "provision", "train", "lab", *extra, "--poll", "1", "--on-interrupt", "stop", "--json"]
    if "--attach" not in extra:
        args[5:5] = ["--job", "templates/bert-pretrain-tiny.yaml", "--set", f"bert_dir={tiny}",
                     "--set", f"corpus_files={tiny}/corpus.txt", "--set", f"model_dir={model}",
                     "--set", f"num_train_steps={STEPS}", "--set", f"save_checkpoints_steps={CKPT}",
                     "--set", "steps_per_execution=10"]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# both seeds in make test-long (a supervised run of the real job, preempted twice)
@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.long), pytest.param(1, marks=pytest.mark.long)])
def test_training_chaos(seed, tiny_bert, tmp_path):
    rng = random.Random(seed)
    # two preemptions: one at a random step, one just as a checkpoint is being written
    plan = sorted([("random", rng.randrange(60, 140)), ("checkpoint", rng.choice((150, 200)))], key=lambda p: p[1])
    kill_supervisor_at = rng.randrange(100, 230)
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    model = tmp_path / "model"
    proc = _train(tiny_bert, model)
    done_ckpt_at_preemption: list[int] = []
    killed = False
    deadline = time.time() + 480
    while time.time() < deadline:
        if proc.poll() is not None:
            if killed:
                break
            break
        time.sleep(0.1)
        p = _progress(model / "progress.json")
        step, ckpt = p.get("step") or 0, p.get("checkpoint_step") or 0
        if plan and p.get("status") == "running" and step >= plan[0][1]:
            kind, _ = plan[0]
            if kind == "checkpoint" and not (step % CKPT == 0 and ckpt < step):
                # wait for the moment the loop has stopped at a boundary and is saving
                if step > plan[0][1] + CKPT:
                    plan[0] = ("checkpoint", (step // CKPT + 1) * CKPT)
                continue
            # the hard kill: these seeds cut the job mid-save (the notice's own save is another test's)
            if run_tpuctl_process("simulate", "preempt", "lab", "--no-notice").code == 0:
                done_ckpt_at_preemption.append(ckpt)
                plan.pop(0)
        if not killed and step >= kill_supervisor_at:
            proc.kill()                       # the laptop dies; the job keeps running on its host
            proc.wait()
            killed = True
            proc = _train(tiny_bert, model, "--attach")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    run = json.loads(out)["run"]
    assert run["status"] == "finished" and run["last_progress"]["step"] == STEPS, run
    home = Path(os.environ["TPUCTL_HOME"])
    run_dir = home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run["run_id"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    # one resume ends every preemption of its outage: two when the second came during the recovery
    resumed = [e["step"] for e in events if e["event"] == "resumed" for _ in e.get("preemptions") or [0]]
    assert len(resumed) == len(done_ckpt_at_preemption) == run["preemptions"], (events, done_ckpt_at_preemption)
    for reported_done, resumed_at in zip(done_ckpt_at_preemption, resumed):
        assert resumed_at >= reported_done, f"checkpoint {reported_done} was lost: resumed at {resumed_at}"
    final = _progress(model / "progress.json")
    assert final["status"] == "finished" and final["step"] == STEPS
