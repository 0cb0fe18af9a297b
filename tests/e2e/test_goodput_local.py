"""Goodput on the local provider, through the installed tpuctl: a `job: command` program preempted
twice (once with the notice, in which it saves; once hard, after which it redoes steps), then
`tpuctl status NAME` and `tpuctl cost RUN` (and their --json) show the run's wall time by cause:
the categories sum to the wall time, and each preemption is broken down by phase."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process
from tests.e2e.local_runs import latest_run_id, model_dir, read_json, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.xdist_group("command-e2e")]

# a loop as people write it: a checkpoint every EVERY steps, and one when SIGTERM comes
PROGRAM = r'''
import json, os, signal, sys, time
d = os.environ["TPUCTL_MODEL_DIR"]
os.makedirs(d, exist_ok=True)
ckpt = os.path.join(d, "state.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
steps, every = int(sys.argv[1]), int(sys.argv[2])
report = open(os.environ["TPUCTL_PROGRESS_FILE"], "a", buffering=1)
def save():
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)
    report.write(json.dumps({"checkpoint_step": step}) + "\n")
def term(*_):
    save()
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
while step < steps:
    time.sleep(0.1)
    step += 1
    report.write(json.dumps({"step": step}) + "\n")
    if step % every == 0:
        save()
save()
'''
STEPS, EVERY = 240, 60


def _step(run_id: str) -> int:
    return read_json(model_dir(run_id) / "state.json").get("step", 0)


def test_status_and_cost_show_the_runs_wall_time_by_cause_summing_to_it(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(PROGRAM)
    (work / "spec.yaml").write_text(f'job: command\ncommand: [python, train.py, "{STEPS}", "{EVERY}"]\n'
                                    f"num_train_steps: {STEPS}\n")
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    proc = subprocess.Popen([str(TPUCTL_BIN), "train", "lab", "--job", str(work / "spec.yaml"), "--poll", "1",
                             "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = wait_for(latest_run_id, proc=proc)
    wait_for(lambda: _step(run_id) >= EVERY, proc=proc)
    time.sleep(0.5)
    assert run_tpuctl_process("simulate", "preempt", "lab", "--grace", "3").code == 0      # saves in the notice
    wait_for(lambda: _step(run_id) >= 3 * EVERY, timeout=120, proc=proc)
    time.sleep(0.7)                                                                    # steps past the checkpoint
    assert run_tpuctl_process("simulate", "preempt", "lab", "--no-notice").code == 0      # they are redone
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    run = json.loads(out)["run"]
    assert (run["status"], run["preemptions"], run["attempts"]) == ("finished", 2, 3), err[-3000:]

    cost = json.loads(run_tpuctl_process("cost", run_id, "--json").out)
    g = cost["clusters"][0]["runs"][0]["goodput"]
    cats = g["categories"]
    assert g["wall_s"] == pytest.approx(run["ended_at"] - run["created_at"], abs=0.01)
    assert sum(c["seconds"] for c in cats.values()) == pytest.approx(g["wall_s"], abs=0.01)
    # a job: command program's steps are dated when the host agent reads its progress (every few seconds)
    assert 0 < g["goodput_pct"] < 100 and cats["goodput"]["seconds"] > 0, json.dumps(g)
    assert cats["provisioning"]["seconds"] > 0 and cats["program_startup"]["seconds"] > 0
    first, second = g["preemptions"]
    assert first["notice"] is True and first["checkpointed_in_notice"] is True and first["steps_redone"] == 0
    assert second["notice"] is False and second["steps_redone"] > 0
    for pre in (first, second):
        recorded = {p["phase"] for p in pre["phases"] if p["recorded"]}
        assert {"recreate", "host bootstrap", "program start and restore to first step"} <= recorded, pre

    text = run_tpuctl_process("cost", run_id).out
    assert f"{run_id}: goodput " in text and "  badput: " in text, text
    assert "  preemption 1 (notice, checkpointed in it; 0 steps redone): " in text, text
    assert "  preemption 2 (no notice seen; " in text, text
    shown = run_tpuctl_process("status", "lab")
    assert f"{run_id}: goodput " in shown.out and "  preemption 2 " in shown.out, shown.out
    status = json.loads(run_tpuctl_process("status", "lab", "--json").out)
    sg = status["clusters"][0]["run"]["goodput"]
    assert sum(c["seconds"] for c in sg["categories"].values()) == pytest.approx(sg["wall_s"], abs=0.01)
    assert sg["wall_s"] == pytest.approx(g["wall_s"], abs=0.01)

    # the supervisor kept the run's summary in its record at the end: the fleet's view (one listing
    # of the bucket's records) says what cost RUN computes from the run's events and exit records
    fleet = json.loads(run_tpuctl_process("cost", "--since", "1d", "--json").out)["fleet"]
    (row,) = [r for r in fleet["runs"] if r["run_id"] == run_id]
    assert row["final"] and (row["accelerator_type"], row["capacity"], row["preemptions"]) == ("v2-8", "spot", 2)
    for key in ("wall_s", "goodput_s", "badput_s"):
        assert row[key] == pytest.approx(g[key], abs=0.1), key
    assert row["preemption_s"] == pytest.approx(g["preemption_loss"]["seconds"], abs=0.1)
    assert row["recovery_s"] == pytest.approx([p["recovery_s"] for p in g["preemptions"]], abs=0.1)
    assert fleet["by_capacity"]["spot"]["recovery_median_s"] == pytest.approx(sum(row["recovery_s"]) / 2, abs=0.1)
    assert f"{run_id} " in run_tpuctl_process("cost", "--since", "1d").out
