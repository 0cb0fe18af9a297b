"""Programs as people write them report progress their own way, and tpuctl reads it (the local
provider, through the installed tpuctl):

- a loop that only prints nanoGPT's line (``iter 100: loss 2.3456, ...``) and a spec with
  ``progress_pattern:``: ``status`` shows its step and loss; preempted, the ``resumed`` event names
  the step it resumed from, and ``cost`` counts its second attempt as training;
- a TensorFlow script that writes only ``tf.summary.scalar`` event files: ``status`` shows its step
  and loss;
- a program that reports nothing at all: ``status`` says "no progress reported", and after a
  preemption the event log claims no step and no steps lost, and ``cost`` counts the second attempt
  as training, not as waiting.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_tpuctl_process
from tests.e2e.local_runs import home as _home
from tests.e2e.local_runs import latest_run_id as _run_id
from tests.e2e.local_runs import model_dir as _model_dir
from tests.e2e.local_runs import read_json as _read
from tests.e2e.local_runs import start_train as _train
from tests.e2e.local_runs import wait_for as _wait

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("command-e2e")]

STEPS, EVERY, PRINT_EVERY, SLEEP = 150, 10, 5, 0.1

# Its own checkpoint every EVERY steps in the model directory; prints nanoGPT's line every
# PRINT_EVERY steps after the step; writes nothing for tpuctl.
NANOGPT_LIKE = r'''
import json, os, sys, time
d = os.environ["TPUCTL_MODEL_DIR"]
os.makedirs(d, exist_ok=True)
ckpt = os.path.join(d, "state.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
steps, every, print_every, pause = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
with open(os.path.join(d, f"attempt-{os.environ['TPUCTL_ATTEMPT']}.json"), "w") as f:
    json.dump({"resumed_at": step}, f)
print(f"number of parameters: 0.01M, resuming at {step}", flush=True)
while step < steps:
    time.sleep(pause)
    step += 1
    if step % print_every == 0:
        print(f"iter {step}: loss {10.0 / step:.4f}, time {pause * 1000:.2f}ms, mfu 1.23%", flush=True)
    if step % every == 0:
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ckpt + ".tmp", ckpt)
'''

SILENT = r'''
import json, os, sys, time
d = os.environ["TPUCTL_MODEL_DIR"]
os.makedirs(d, exist_ok=True)
ckpt = os.path.join(d, "state.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
with open(os.path.join(d, f"attempt-{os.environ['TPUCTL_ATTEMPT']}.json"), "w") as f:
    json.dump({"resumed_at": step, "time": time.time()}, f)
while step < int(sys.argv[1]):
    time.sleep(float(sys.argv[2]))
    step += 1
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)
'''

# What tf.summary.scalar writes (TensorBoard's summary_v2.scalar: tf.summary.write of a float32
# tensor with the scalars plugin's metadata); tf.summary.write itself, since TensorFlow 2.21 without
# the tensorboard package has no tf.summary.scalar.
TF_SUMMARIES = r'''
import os, sys, time
import tensorflow as tf
scalars = tf.compat.v1.SummaryMetadata(plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars"))
writer = tf.summary.create_file_writer(os.path.join(os.environ["TPUCTL_MODEL_DIR"], "logs"))
with writer.as_default():
    for step in range(1, int(sys.argv[1]) + 1):
        tf.summary.write("train/loss", tf.constant(5.0 / step, tf.float32), step=step, metadata=scalars)
        tf.summary.write("learning_rate", tf.constant(0.001, tf.float32), step=step, metadata=scalars)
        writer.flush()
        time.sleep(0.05)
'''


# The same summaries from a program that checkpoints its step every EVERY steps and resumes from it:
# each attempt a new event file (the writer's name has its time and pid), from the step after the
# checkpoint; nothing printed, no progress file.
TF_SUMMARIES_RESUMING = r'''
import json, os, sys, time
import tensorflow as tf
d = os.environ["TPUCTL_MODEL_DIR"]
os.makedirs(d, exist_ok=True)
ckpt = os.path.join(d, "state.json")
step = json.load(open(ckpt))["step"] if os.path.exists(ckpt) else 0
with open(os.path.join(d, f"attempt-{os.environ['TPUCTL_ATTEMPT']}.json"), "w") as f:
    json.dump({"resumed_at": step}, f)
steps, every, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
scalars = tf.compat.v1.SummaryMetadata(plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars"))
writer = tf.summary.create_file_writer(os.path.join(d, "logs"))
with writer.as_default():
    while step < steps:
        time.sleep(pause)
        step += 1
        tf.summary.write("train/loss", tf.constant(10.0 / step, tf.float32), step=step, metadata=scalars)
        writer.flush()
        if step % every == 0:
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"step": step}, f)
            os.replace(ckpt + ".tmp", ckpt)
'''


def _run_line(run_id: str) -> str:
    """The run's row of ``tpuctl status``."""
    out = run_tpuctl_process("status").out
    return next((line for line in out.splitlines() if line.startswith(run_id)), "")


def _events(run_id: str) -> list[dict]:
    path = _home() / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _hours(run_id: str) -> dict:
    r = run_tpuctl_process("cost", run_id, "--json")
    assert r.code == 0, r.err[-2000:]
    return r.json()["clusters"][0]["account"]["hours"]


def test_a_program_that_only_prints_its_progress_is_shown_resumed_and_accounted_by_its_pattern(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(NANOGPT_LIKE)
    spec = (f'job: command\ncommand: [python, train.py, "{STEPS}", "{EVERY}", "{PRINT_EVERY}", "{SLEEP}"]\n'
            f"num_train_steps: {STEPS}\n"
            "progress_pattern: 'iter (?P<step>\\d+): loss (?P<loss>[\\d.]+), time [\\d.]+ms, mfu (?P<mfu>[\\d.]+)%'\n")
    (work / "spec.yaml").write_text(spec)
    (work / "bad.yaml").write_text(spec.replace("(?P<step>", "(?P<iter>"))
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    bad = run_tpuctl_process("train", "lab", "--job", str(work / "bad.yaml"))
    assert bad.code == 2 and "progress_pattern has no named group step" in bad.err and _run_id() is None, bad.err

    proc = _train("lab", "--job", str(work / "spec.yaml"))
    run_id = _wait(_run_id, proc=proc)
    model = _model_dir(run_id)
    _wait(lambda: (_read(model / "progress.json").get("step") or 0) >= 2 * EVERY + PRINT_EVERY, proc=proc)
    row = _wait(lambda: (line := _run_line(run_id)) and f"/{STEPS}" in line and line, proc=proc)
    step = int(row.split(f"/{STEPS}")[0].split()[-1])
    assert step >= 2 * EVERY and f"{10.0 / step:.4f}" in row, row         # step and loss, from the printed line
    assert run_tpuctl_process("simulate", "preempt", "lab").code == 0
    out, err = proc.communicate(timeout=180)
    run = json.loads(out)["run"]
    assert (run["status"], run["preemptions"], run["last_progress"]["step"]) == ("finished", 1, STEPS), err[-3000:]

    resumed_at = _read(model / "attempt-1.json")["resumed_at"]
    assert resumed_at >= 2 * EVERY
    resumed = [e for e in _events(run_id) if e["event"] == "resumed"]
    assert len(resumed) == 1 and resumed_at - PRINT_EVERY <= resumed[0]["step"] <= resumed_at, resumed
    assert resumed[0]["steps_lost"] >= 0
    progress = _read(model / "progress.json")
    assert progress["loss"] == pytest.approx(10.0 / STEPS, abs=1e-4) and progress["metrics"]["mfu"] == 1.23
    # the second attempt trained (STEPS - resumed_at) steps: that time is training, not waiting
    hours = _hours(run_id)
    second = (STEPS - resumed_at) * SLEEP
    assert hours["training"] * 3600 >= 0.8 * second, hours
    assert hours["waiting"] * 3600 <= resumed[0]["seconds_lost"] + 1.5, (hours, resumed)


def test_a_tensorflow_script_that_writes_only_summaries_shows_its_step_and_loss(tmp_path):
    pytest.importorskip("tensorflow")
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(TF_SUMMARIES)
    (work / "spec.yaml").write_text('job: command\ncommand: [python, train.py, "40"]\nnum_train_steps: 40\n')
    assert run_tpuctl_process("up", "lab").code == 0
    proc = _train("lab", "--job", str(work / "spec.yaml"))
    out, err = proc.communicate(timeout=240)
    run = json.loads(out)["run"]
    assert (run["status"], run["last_progress"]["step"]) == ("finished", 40), err[-3000:]
    assert run["last_progress"]["loss"] == pytest.approx(5.0 / 40, rel=1e-6)
    assert run["last_progress"]["metrics"]["learning_rate"] == pytest.approx(0.001, rel=1e-6)
    row = _run_line(run["run_id"])
    assert "40/40" in row and "0.1250" in row, row


@pytest.mark.long
def test_a_tensorflow_script_that_writes_only_summaries_is_shown_resumed_and_accounted_after_a_preemption(tmp_path):
    """tf.summary's tensor-valued scalars (the other encoding than simple_value, which the
    nanoGPT-like and unit tests cover) are the only progress: preempted after a checkpoint, the
    run's status shows step and loss, the resumed event names the step the program resumed from,
    and cost counts the second attempt as training."""
    pytest.importorskip("tensorflow")
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text(TF_SUMMARIES_RESUMING)
    (work / "spec.yaml").write_text(f'job: command\ncommand: [python, train.py, "{STEPS}", "{EVERY}", "{SLEEP}"]\n'
                                    f"num_train_steps: {STEPS}\n")
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    proc = _train("lab", "--job", str(work / "spec.yaml"))
    run_id = _wait(_run_id, proc=proc)
    model = _model_dir(run_id)
    at = 2 * EVERY + EVERY // 2
    _wait(lambda: (_read(model / "progress.json").get("step") or 0) >= EVERY, timeout=120, proc=proc)
    row = _wait(lambda: (line := _run_line(run_id)) and f"/{STEPS}" in line and line, proc=proc)
    shown = int(row.split(f"/{STEPS}")[0].split()[-1])
    assert shown >= 1 and f"{10.0 / shown:.4f}" in row and "no progress reported" not in row, row
    assert run_tpuctl_process("simulate", "preempt", "lab", "--at-step", str(at)).code == 0
    out, err = proc.communicate(timeout=240)
    run = json.loads(out)["run"]
    assert (run["status"], run["preemptions"], run["last_progress"]["step"]) == ("finished", 1, STEPS), err[-3000:]
    assert run["last_progress"]["loss"] == pytest.approx(10.0 / STEPS, rel=1e-6)

    resumed_at = _read(model / "attempt-1.json")["resumed_at"]
    assert resumed_at >= 2 * EVERY
    resumed = [e for e in _events(run_id) if e["event"] == "resumed"]
    assert len(resumed) == 1 and resumed_at - 1 <= resumed[0]["step"] <= resumed_at, resumed
    assert resumed[0]["steps_lost"] >= 0
    said = next(line for line in run_tpuctl_process("logs", run_id, "--events").out.splitlines() if " resumed " in line)
    assert f"step={resumed[0]['step']}" in said, said
    row = _run_line(run_id)
    assert f"{STEPS}/{STEPS}" in row and f"{10.0 / STEPS:.4f}" in row, row
    # the second attempt trained (STEPS - resumed_at) steps: that time is training, not waiting
    hours = _hours(run_id)
    second = (STEPS - resumed_at) * SLEEP
    assert hours["training"] * 3600 >= 0.8 * second, hours
    assert hours["waiting"] * 3600 <= resumed[0]["seconds_lost"] + 1.5, (hours, resumed)


def test_a_program_that_reports_nothing_is_said_so_and_its_second_attempt_is_training(tmp_path):
    work = tmp_path / "prog"
    work.mkdir()
    (work / "silent.py").write_text(SILENT)
    (work / "spec.yaml").write_text('job: command\ncommand: [python, silent.py, "120", "0.05"]\n')
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    proc = _train("lab", "--job", str(work / "spec.yaml"))
    run_id = _wait(_run_id, proc=proc)
    model = _model_dir(run_id)
    _wait(lambda: _read(model / "state.json").get("step", 0) >= 20, proc=proc)
    row = _wait(lambda: (line := _run_line(run_id)) and "running" in line and line, proc=proc)
    assert "no progress reported" in row and "0/" not in row, row
    assert run_tpuctl_process("simulate", "preempt", "lab").code == 0
    second = _wait(lambda: _read(model / "attempt-1.json"), proc=proc)
    out, err = proc.communicate(timeout=180)
    run = json.loads(out)["run"]
    assert (run["status"], run["preemptions"], run["steps_lost"]) == ("finished", 1, 0), err[-3000:]
    events = _events(run_id)
    resumed = [e for e in events if e["event"] == "resumed"]
    preempted = next(e for e in events if e["event"] == "preempted")
    finished = next(e for e in events if e["event"] == "finished")
    # the recovery ended when the new attempt's program ran, long before the run finished
    assert len(resumed) == 1 and resumed[0]["step"] == "unknown" and "steps_lost" not in resumed[0], resumed
    assert resumed[0]["time"] < finished["time"] - 2
    assert preempted["time"] + resumed[0]["seconds_lost"] <= second["time"] + 1.5
    logged = run_tpuctl_process("logs", run_id, "--events").out
    said = {line.split()[1]: line for line in logged.splitlines() if len(line.split()) > 1}
    assert "step=unknown" in said["resumed"] and "step=unknown" in said["preempted"], logged
    assert "steps_lost" not in logged and "step=0" not in logged, logged
    assert "no progress reported" in _run_line(run_id)
    hours = _hours(run_id)
    trained_after = (120 - second["resumed_at"]) * 0.05
    assert hours["training"] * 3600 >= 0.8 * trained_after, hours
    assert hours["waiting"] * 3600 <= resumed[0]["seconds_lost"] + 1.5, (hours, resumed)
    # its running time is named for what it is, in cost's hours by state and in the goodput breakdown
    cost = run_tpuctl_process("cost", run_id).out
    table_row = next(line for line in cost.splitlines() if line.startswith("training"))
    supervised = next(line for line in cost.splitlines() if "as its supervisor measured" in line)
    assert table_row.startswith("training (no progress reported) "), cost
    assert "training (no progress reported) " in supervised and "waiting" in supervised, supervised
    for shown in (cost, run_tpuctl_process("status", "lab").out):
        said = [line for line in shown.splitlines() if line.startswith("  training (no progress reported) ")]
        assert said and "the program reported no step" in said[0], shown
