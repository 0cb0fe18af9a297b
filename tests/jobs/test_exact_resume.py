"""Exact resumption: a run killed (SIGKILL) once and stopped (SIGTERM, exit 42) once, resumed
each time, ends with the very weights of an uninterrupted run -- bitwise, on the CPU -- for
pretraining and fine-tuning, over several epochs of the data."""

from __future__ import annotations

import re
import signal

import numpy as np
import pytest

from .conftest import (
    finetune_spec,
    job_env,
    newest_in_state,
    pretrain_spec,
    read_progress,
    run_job,
    start_job,
    wait_for,
)

pytestmark = [pytest.mark.tf, pytest.mark.slow]

# Small host loops and frequent checkpoints, so the kill and the stop land mid-run; a few epochs
# of the tiny data sets (382 pretraining and 480 fine-tuning examples, batch 16).
SETTINGS = {"save_checkpoints_steps": 10, "steps_per_execution": 5}
PRETRAIN_STEPS, FINETUNE_STEPS = 60, 65


def checkpoint_arrays(prefix) -> dict[str, np.ndarray]:
    """Every training variable of a checkpoint: weights, Adam moments, step, input position.
    Not ``save_counter``: it counts the saves, and the stopped run saved once more."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def steps_per_epoch(output: str) -> float:
    match = re.search(r"\(?([\d.]+) steps per epoch", output)
    assert match, output[-2000:]
    return float(match.group(1))


def interrupt_twice(spec, model_dir, total: int) -> tuple[int, int, str]:
    """SIGKILL after the second checkpoint; resume; SIGTERM a few steps later (the process is
    frozen first, so the signal lands wherever the run is, then exits 42); resume to the end.
    Returns (step killed at, step stopped at, output of the last run)."""
    env = job_env(TPUCTL_HEARTBEAT_SECONDS="0.2")
    proc = start_job(spec, env=env)
    wait_for(lambda: ((read_progress(model_dir) or {}).get("checkpoint_step") or 0) >= 20, proc,
             what="the second checkpoint")
    proc.kill()
    proc.wait(timeout=30)
    killed_at = newest_in_state(model_dir)
    assert killed_at < total

    proc = start_job(spec, env=env)
    wait_for(lambda: (read_progress(model_dir) or {}).get("step", 0) >= killed_at + 7, proc,
             what="steps after the resume")
    proc.send_signal(signal.SIGSTOP)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 42, output[-3000:]
    record = read_progress(model_dir)
    stopped_at = record["step"]
    assert record["status"] == "preempted" and record["checkpoint_step"] == stopped_at
    assert killed_at < stopped_at < total
    assert f"resumed from {model_dir / f'ckpt-{killed_at}'} (step {killed_at})" in output

    last = run_job(spec, env=env)
    assert last.returncode == 0, last.stderr[-3000:]
    assert (f"(step {stopped_at}); input stream at example {stopped_at * 16}"  # batch 16
            in last.stderr)
    assert read_progress(model_dir)["status"] == "finished"
    return killed_at, stopped_at, last.stderr


# make test-long; make test checks bitwise resumption on an emulated slice under kills and restarts
# (tests/chaos/test_slices_chaos.py)
@pytest.mark.parametrize("job", [pytest.param("pretrain", marks=pytest.mark.long),
                                 pytest.param("finetune", marks=pytest.mark.long)])
def test_killed_and_stopped_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path, tiny_dir, job):
    if job == "pretrain":
        total = PRETRAIN_STEPS

        def spec(name):
            return pretrain_spec(tmp_path / name, tiny_dir, num_train_steps=total, **SETTINGS)

        straight_dir, interrupted_dir = tmp_path / "a" / "pretrain", tmp_path / "b" / "pretrain"
    else:
        total = FINETUNE_STEPS

        def spec(name):
            return finetune_spec(tmp_path / name, tiny_dir, num_train_steps=total, **SETTINGS)

        straight_dir, interrupted_dir = tmp_path / "a" / "run", tmp_path / "b" / "run"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()

    straight = run_job(spec("a"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    per_epoch = steps_per_epoch(straight.stderr)
    assert total > 2 * per_epoch  # the runs cross epoch boundaries (and the resumes may too)

    killed_at, stopped_at, _ = interrupt_twice(spec("b"), interrupted_dir, total)

    want = checkpoint_arrays(straight_dir / f"ckpt-{total}")
    got = checkpoint_arrays(interrupted_dir / f"ckpt-{total}")
    assert set(got) == set(want)
    assert any(k.startswith("input_position") for k in want)
    differing = [k for k in want if not np.array_equal(want[k], got[k])]
    assert differing == [], f"killed at {killed_at}, stopped at {stopped_at}: {differing[:5]}"
    # ... and training did move the weights (the comparison is not between two copies of init).
    import tensorflow as tf

    init = tf.train.load_checkpoint(str(tiny_dir / "bert_model.ckpt"))
    name = "bert/encoder/layer_1/attention/self/query/kernel"
    key = "model/" + name.replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"
    assert not np.allclose(want[key], init.get_tensor(name))
