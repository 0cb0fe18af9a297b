"""Preemption: SIGKILL, a truncated checkpoint and SIGTERM, each followed by a resume."""

from __future__ import annotations

import signal
import time

import pytest

from .conftest import (
    checkpoint_steps,
    finetune_spec,
    job_env,
    newest_in_state,
    read_progress,
    start_job,
    wait_for,
)

pytestmark = [pytest.mark.tf, pytest.mark.slow]

# Long enough that the run cannot finish between our poll (every 50 ms) and the kill: 400 tiny
# steps take seconds; short enough for the resumed run to finish quickly.
TOTAL = 400
LONG = {"num_train_steps": TOTAL, "save_checkpoints_steps": 25, "steps_per_execution": 25}


@pytest.mark.long
def test_sigkill_after_a_checkpoint_resumes_from_it_and_finishes(tmp_path, tiny_dir, job_here):
    spec = finetune_spec(tmp_path, tiny_dir, **LONG)
    model_dir = tmp_path / "run"
    proc = start_job(spec)
    wait_for(lambda: (read_progress(model_dir) or {}).get("checkpoint_step"), proc,
             what="the first checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    killed_at = newest_in_state(model_dir)
    assert 25 <= killed_at < TOTAL
    assert read_progress(model_dir)["status"] == "running"  # a killed job cannot say goodbye

    again = job_here(spec)  # the resume, in this process: the killed job was a process of its own
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {model_dir / f'ckpt-{killed_at}'} (step {killed_at})" in again.stderr
    assert "initialized" not in again.stderr  # init_checkpoint only when nothing to resume
    record = read_progress(model_dir)
    assert record["resumed_from_step"] == killed_at
    assert record["status"] == "finished" and record["step"] == TOTAL
    assert record["checkpoint_step"] == TOTAL
    first_loop = next(line for line in again.stderr.splitlines() if " step " in line)
    assert f"step {killed_at + 25}/{TOTAL}" in first_loop  # continued, did not start at 0


@pytest.mark.long
def test_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, tiny_dir, job_here):
    spec = finetune_spec(tmp_path, tiny_dir, **LONG)
    model_dir = tmp_path / "run"
    proc = start_job(spec)
    wait_for(lambda: ((read_progress(model_dir) or {}).get("checkpoint_step") or 0) >= 50, proc,
             what="two checkpoints")
    proc.kill()
    proc.wait(timeout=30)
    steps = checkpoint_steps(model_dir)
    newest, previous = steps[-1], steps[-2]
    data = model_dir / f"ckpt-{newest}.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # cut mid-upload

    again = job_here(spec)  # the resume, in this process: the killed job was a process of its own
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"checkpoint {model_dir / f'ckpt-{newest}'} does not restore" in again.stderr
    assert f"resumed from {model_dir / f'ckpt-{previous}'} (step {previous})" in again.stderr
    record = read_progress(model_dir)
    assert record["resumed_from_step"] == previous
    assert record["status"] == "finished" and record["step"] == TOTAL
    assert (model_dir / f"ckpt-{newest}.data-00000-of-00001.damaged").exists()


def test_sigterm_checkpoints_the_current_step_and_exits_42(tmp_path, tiny_dir):
    """Through ``tpuctl job run`` (which execs the job): one host loop of 100000 steps, so only
    the in-loop stop can end it quickly; the heartbeat keeps progress.json fresh meanwhile,
    step included."""
    spec = finetune_spec(tmp_path, tiny_dir, num_train_steps=100000, steps_per_execution=100000,
                         save_checkpoints_steps=100000)
    model_dir = tmp_path / "run"
    proc = start_job(spec, via_tpuctl=True, env=job_env(TPUCTL_HEARTBEAT_SECONDS="0.3",
                                                        TPUCTL_RUN="run-7"))
    def started():
        record = read_progress(model_dir)
        return record if record and record.get("device") else None

    def stepping():
        record = read_progress(model_dir)
        return record if record and record["step"] > 0 else None

    first = wait_for(started, proc, what="the job to start")
    assert first["pid"] == proc.pid  # exec: the job is the process tpuctl started
    assert first["run_id"] == "run-7" and first["device"]["type"] == "cpu"
    # Inside the single long host loop the heartbeat still moves: time, and the live step.
    during = wait_for(stepping, proc, what="steps inside the host loop")
    assert during["status"] == "running" and during["time"] > first["time"]
    assert during["checkpoint_step"] is None
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    proc.wait(timeout=60)
    assert proc.returncode == 42
    assert time.monotonic() - sent < 15
    record = read_progress(model_dir)
    assert record["status"] == "preempted" and record["message"] == "SIGTERM"
    assert during["step"] <= record["step"] < 100000
    assert record["checkpoint_step"] == record["step"] == newest_in_state(model_dir)
    output = proc.stdout.read()
    assert f"SIGTERM: checkpoint at step {record['step']} saved; exit 42" in output


def test_sigterm_while_connecting_to_a_lost_tpu_exits_42_at_once(tmp_path, tiny_dir):
    """Before training there is nothing to save, and the main thread may sit in TensorFlow's
    TPU connection for minutes: the signal ends the process right away, still with 42."""
    spec = finetune_spec(tmp_path, tiny_dir)
    model_dir = tmp_path / "run"
    env = job_env(TPU_NAME="grpc://127.0.0.1:9", TPUCTL_HEARTBEAT_SECONDS="0.3")
    env.pop("TPUCTL_DEVICE")
    proc = start_job(spec, env=env)
    wait_for(lambda: read_progress(model_dir), proc, what="the job to start")
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == 42
    record = read_progress(model_dir)
    assert record["status"] == "preempted"
    assert checkpoint_steps(model_dir) == []
