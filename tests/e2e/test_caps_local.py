"""Budget and deadline caps on the local provider, with the real job (the tiny BERT fine-tune).

A run whose spend would pass its budget stops on a checkpoint and leaves no TPU, with the laptop
out of the loop (``--detach``: the host's supervisor enforces it); a run that cannot meet its
deadline stops early and ``train`` exits 1 saying why; a run within both finishes, and ``status``
and ``cost`` show its estimate against what it took (measured from an earlier run of the job).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl_process

pytestmark = [pytest.mark.tf, pytest.mark.xdist_group("tf")]


def _spec(tiny: Path, steps: int, poll: str = "1") -> list[str]:
    return ["--job", "templates/bert-finetune-tiny.yaml", "--set", f"bert_dir={tiny}",
            "--set", f"train_file={tiny}/train.tsv", "--set", f"num_train_steps={steps}",
            "--set", "steps_per_execution=10", "--poll", poll]


def _status() -> dict:
    r = run_tpuctl_process("status", "--json")
    assert r.code == 0, r.err
    return r.json()["clusters"][0]


@pytest.mark.long
def test_a_budget_stops_a_detached_run_on_a_checkpoint_and_deletes_its_tpu(tiny_bert):
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    # $1.35/h: $0.035 is 93 s, of which about 60 s are kept for the stop itself
    r = run_tpuctl_process("train", "lab", *_spec(tiny_bert, 1_000_000), "--budget-usd", "0.035", "--detach",
                           timeout=120)
    assert r.code == 0, r.err
    deadline = time.time() + 240
    while time.time() < deadline and _status()["run"]["status"] in ("starting", "running"):
        time.sleep(2)
    st = _status()
    run = st["run"]
    assert run["status"] == "stopped" and run["pace"]["stopped_by"] == "budget", run
    assert st["tpu"] is None, "the TPU was left billing"
    assert 0 < run["pace"]["spent_usd"] <= 0.035
    progress = json.loads((Path(run["model_dir"]) / "progress.json").read_text())
    assert progress["step"] > 0 and progress["checkpoint_step"] == progress["step"], progress
    assert (Path(run["model_dir"]) / f"ckpt-{progress['step']}.index").exists()
    events = run_tpuctl_process("logs", run["run_id"], "--events").out
    assert "cap_reached cap=budget" in events and "stopped_by=budget" in events
    text = run_tpuctl_process("status").out
    assert f"{run['run_id']} stopped: budget: $" in text


def test_a_deadline_the_run_cannot_meet_stops_it_early_and_train_exits_1(tiny_bert):
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    when = (datetime.now(timezone.utc) + timedelta(minutes=20)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    r = run_tpuctl_process("train", "lab", *_spec(tiny_bert, 10_000_000), "--deadline", when, "--json",
                           timeout=240)
    assert r.code == 1, r.err[-2000:]
    run = r.json()["run"]
    assert run["status"] == "stopped" and run["stopped_by"] == "deadline", run["reason"]
    assert "past the deadline" in run["reason"] and run["last_progress"]["step"] < 10_000_000
    assert "tpuctl: error: run lab-" in r.err and "stopped: deadline:" in r.err and "--set model_dir=" in r.err
    assert _status()["tpu"] is None


@pytest.mark.long
def test_a_run_within_its_caps_finishes_and_shows_its_estimate_against_the_actual(tiny_bert):
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    probe = run_tpuctl_process("train", "lab", *_spec(tiny_bert, 400, poll="0.5"), "--json", timeout=240)
    assert probe.code == 0, probe.err[-2000:]
    assert probe.json()["run"]["pace"]["meter"]["steps"] > 0, "the probe measured no steady rate"
    when = (datetime.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    r = run_tpuctl_process("train", "lab", *_spec(tiny_bert, 400), "--budget-usd", "5", "--deadline", when,
                           "--json", timeout=240)
    assert r.code == 0, r.err[-2000:]
    run = r.json()["run"]
    assert run["status"] == "finished" and run["stopped_by"] is None
    assert run["estimate"]["speed_source"] == "measured" and run["estimate"]["steps"] == 400
    assert "estimate: " in r.err and "(measured speed" in r.err
    vs = _status()["run"]["pace"]["vs_estimate"]
    assert vs["steps"] == 400 and vs["actual_s"] > 0 and vs["time_error"] is not None
    assert f"{run['run_id']}: estimate vs actual for 400 steps:" in run_tpuctl_process("status").out
    cost = run_tpuctl_process("cost", run["run_id"])
    assert cost.code == 0 and "estimate vs actual for 400 steps" in cost.out, cost.out
