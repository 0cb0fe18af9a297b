"""`tpuctl train` on the local provider: a real tiny BERT survives injected preemptions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

pytestmark = [pytest.mark.tf, pytest.mark.xdist_group("tf")]

STEPS = 400
CKPT = 50


def _progress(model_dir: Path) -> dict:
    try:
        return json.loads((model_dir / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def _start_train(tiny: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "provision", "train", "lab", "--job", "templates/bert-pretrain-tiny.yaml",
            "--set", f"bert_dir={tiny}", "--set", f"corpus_files={tiny}/corpus.txt",
            "--set", f"num_train_steps={STEPS}", "--set", f"save_checkpoints_steps={CKPT}",
            "--set", "steps_per_execution=10", "--poll", "1", "--on-interrupt", "stop", "--json", *extra]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_dir(home: Path) -> Path:
    runs = sorted((home / "runs").glob("*.json"))
    entry = json.loads(runs[-1].read_text())
    return home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / entry["run_id"]


@pytest.mark.long
def test_two_preemptions_complete_and_lose_at_most_one_checkpoint_interval(tiny_bert, isolated_env):
    home = Path(os.environ["TPUCTL_HOME"])
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    proc = _start_train(tiny_bert)
    deadline = time.time() + 420
    preempted_at: list[int] = []
    model_dir = None
    while proc.poll() is None and time.time() < deadline:
        time.sleep(0.3)
        if model_dir is None:
            if (home / "runs").is_dir() and list((home / "runs").glob("*.json")):
                model_dir = _run_dir(home) / "model"
            continue
        p = _progress(model_dir)
        step, status = p.get("step") or 0, p.get("status")
        # preempt mid-run, once after step 120 and once more after step 270 of a later attempt
        target = 120 if not preempted_at else 270
        if len(preempted_at) < 2 and status == "running" and step >= target and \
                (not preempted_at or (p.get("resumed_from_step") or 0) > 0):
            r = run_tpuctl_process("simulate", "preempt", "lab", "--no-notice")   # a TPU lost at once
            if r.code == 0:
                preempted_at.append(step)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert len(preempted_at) == 2, (preempted_at, err[-2000:])
    run = json.loads(out)["run"]
    assert run["status"] == "finished" and run["last_progress"]["step"] == STEPS
    assert run["preemptions"] == 2 and run["failures"] == 0 and run["attempts"] == 3
    events = [json.loads(line) for line in (_run_dir(home) / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.count("preempted") == 2 and kinds.count("recreated") == 2 and kinds.count("resumed") == 2
    for e in events:
        if e["event"] == "resumed":
            assert e["step"] > 0 and e["step"] % CKPT == 0, e          # resumed from a checkpoint, not 0
            assert 0 <= e["steps_lost"] <= CKPT, e                      # at most one checkpoint interval
    assert run["steps_lost"] <= 2 * CKPT
    final = _progress(_run_dir(home) / "model")
    assert final["status"] == "finished" and final["step"] == STEPS
    # the TPU came back as the same preemptible TPU
    st = run_tpuctl_process("status", "--json").json()["clusters"][0]
    assert st["tpu"]["state"] == "READY" and st["tpu"]["preemptible"]
    assert st["run"]["preemptions"] == 2 and st["run"]["status"] == "finished"


def test_a_run_that_crashes_the_same_way_before_its_first_step_stops_at_its_second_attempt(tiny_bert, tmp_path):
    """Not --max-failures attempts of the same traceback, each billing a TPU: two, with the error
    line in train's output and the run's reason."""
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bert, broken)
    data = next(broken.glob("bert_model.ckpt.data-*"))
    data.write_bytes(data.read_bytes()[:64])     # the checkpoint restores with an error every time
    assert run_tpuctl_process("up", "lab").code == 0
    proc = _start_train(broken, "--max-failures", "3")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    run = json.loads(out)["run"]
    assert run["status"] == "gave_up" and run["failures"] == 2 and run["attempts"] == 2
    assert run["reason"].startswith("the job failed twice in a row before its first progress, with the same error: ")
    error_line = run["reason"].split("with the same error: ", 1)[1].split("; not retried again", 1)[0]
    assert f"  | {error_line}" in err                # the exception line, where train prints
    assert "tpuctl: error: run lab-" in err and "stopped: the job failed twice in a row" in err


def test_a_job_that_says_its_input_cannot_work_ends_the_run_at_once(tiny_bert, tmp_path):
    """Exit 2 after the spec checks (here: a train file with a header and no examples, which only
    the job reads) is not retried on a billed TPU, whatever --max-failures allows: each retry
    would bill and fail the same way."""
    empty = tmp_path / "train.tsv"
    empty.write_text("text\tlabel\n")
    assert run_tpuctl_process("up", "lab").code == 0
    r = run_tpuctl_process("train", "lab", "--job", "templates/bert-finetune-tiny.yaml", "--set", f"bert_dir={tiny_bert}",
                           "--set", f"train_file={empty}", "--set", f"model_dir={tmp_path}/m", "--max-failures", "5",
                           "--poll", "1", "--json", timeout=300)
    assert r.code == 1, r.err[-2000:]
    run = r.json()["run"]
    assert run["status"] == "gave_up" and run["attempts"] == 1 and run["failures"] == 1, run
    assert "cannot run (exit 2" in run["reason"]
    log = run_tpuctl_process("logs", run["run_id"])
    assert "has a header but no examples" in log.out


def test_detached_run_survives_the_laptop_and_a_preemption_and_logs_follow_it(tiny_bert, isolated_env):
    """The README tour's path: train --detach, the TPU preempted under the running attempt, logs
    followed to the end, then what it cost. The recreate starts as soon as the preemption is seen
    (not when the killed host's heartbeat goes stale, 30 s later), and the 60 steps trained after
    it are training time in tpuctl cost, as the ledger and as the supervisor measured. The run's
    channel (train --notify), told by the detached supervisor with this command long gone, hears
    of exactly the preemption, the recreation, the resume and the finish (docs/notify.md)."""
    from tests.receivers import http_receiver

    home = Path(os.environ["TPUCTL_HOME"])
    hook = http_receiver()
    added = subprocess.run([str(TPUCTL_BIN), "notify", "add", "hook", "--webhook"], input=f"{hook.url}/run\n",
                           text=True, capture_output=True, timeout=60, check=False)
    assert added.returncode == 0, added.stderr
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    args = ["train", "lab", "--job", "templates/bert-finetune-tiny.yaml", "--set", f"bert_dir={tiny_bert}",
            "--set", f"train_file={tiny_bert}/train.tsv", "--set", f"dev_file={tiny_bert}/dev.tsv",
            "--set", "num_train_steps=60", "--detach", "--poll", "1", "--json", "--notify", "hook"]
    r = run_tpuctl_process(*args)
    assert r.code == 0, r.err
    run_id = r.json()["run_id"]
    assert r.json()["detached"]
    # the command returned at once; a detached supervisor on this "host" runs the job: preempt the
    # TPU once the attempt's host has reported alive
    beat = _run_dir(home) / "attempts" / "1" / "alive-0.json"
    deadline = time.time() + 120
    while not beat.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert beat.exists(), "attempt 1 never started"
    assert run_tpuctl_process("simulate", "preempt", "lab").code == 0
    logs = run_tpuctl_process("logs", run_id, "--follow", timeout=300)
    assert logs.code == 0, logs.err
    assert f"[tpuctl] attempt 2 of run {run_id}" in logs.out and "exited with code 0" in logs.out
    events = [json.loads(line) for line in (_run_dir(home) / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events if not e["event"].startswith("notify_")]
    assert kinds.count("preempted") == 1 and kinds.count("resumed") == 1 and kinds[-1] == "finished", kinds
    preempted, recreated = (next(e for e in events if e["event"] == k) for k in ("preempted", "recreated"))
    assert recreated["time"] - recreated["seconds"] - preempted["time"] < 10, (preempted, recreated)
    deadline = time.time() + 30            # the supervisor sends the last notice before it exits
    while time.time() < deadline:
        sent = [json.loads(line) for line in (_run_dir(home) / "events.jsonl").read_text().splitlines()
                if '"notify_sent"' in line]
        if len(sent) >= 4:
            break
        time.sleep(0.2)
    hook.close()
    told = [m.json() for m in hook.received]
    assert [(t["kind"], t["subject"]) for t in told] == [(k, run_id) for k in ("preempted", "recreated", "resumed",
                                                                                "finished")], told
    assert told[-1]["fields"]["step"] == 60 and "eval_accuracy" in told[-1]["fields"]["metrics"]
    assert sorted(e["notice"] for e in sent) == ["finished", "preempted", "recreated", "resumed"], sent
    st = run_tpuctl_process("status", "--json").json()["clusters"][0]["run"]
    assert st["run_id"] == run_id and st["status"] == "finished" and st["step"] == 60

    cost = run_tpuctl_process("cost", "lab", "--json").json()["clusters"][0]
    assert cost["account"]["hours"]["training"] > 0, cost["account"]
    [run] = cost["runs"]
    assert run["seconds_by_state"].get("training", 0) > 0, run
    text = run_tpuctl_process("cost", "lab").out
    [training] = [line.split() for line in text.splitlines() if line.startswith("training ")]
    assert training[2] != "0s", text
    assert "training " in next(line for line in text.splitlines() if "as its supervisor measured" in line)
