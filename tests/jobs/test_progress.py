"""progress.json: the record the control plane reads without TensorFlow."""

from __future__ import annotations

import json

from jobs.runner import progress


def test_reader_round_trip_and_liveness(tmp_path):
    record = progress.Progress(step=120, num_train_steps=400, loss=2.5, time=1000.0,
                               started_at=900.0, status="running", checkpoint_step=100,
                               device={"type": "cpu", "count": 1})
    (tmp_path / "progress.json").write_text(record.to_json())
    back = progress.read(str(tmp_path))
    assert back == record
    assert back.is_live(now=1059.0) and not back.is_live(now=1061.0)
    back.status = "finished"
    assert not back.is_live(now=1001.0)


def test_every_contract_key_is_written(tmp_path):
    data = json.loads(progress.Progress().to_json())
    for key in ("step", "num_train_steps", "loss", "examples_per_sec", "steps_per_sec", "time",
                "started_at", "status", "checkpoint_step", "resumed_from_step", "run_id", "pid",
                "host", "device"):
        assert key in data


def test_missing_malformed_and_newer_records(tmp_path):
    assert progress.read(str(tmp_path)) is None
    (tmp_path / "progress.json").write_text('{"step": 3, "status": "running", "future_key": 1}')
    assert progress.read(str(tmp_path)).step == 3
    (tmp_path / "progress.json").write_text('{"step": 3')
    assert progress.read(str(tmp_path)) is None
    (tmp_path / "progress.json").write_text('{"status": "exploded"}')
    assert progress.read(str(tmp_path / "progress.json")) is None


def test_the_first_step_past_a_resume_is_dated_once_per_process(tmp_path):
    """The supervisor ends a recovery (and tpuctl cost its waiting) at this time, however late it
    reads the record: the step time alone says only when the newest step was reached."""
    from jobs.runner.heartbeat import ProgressWriter

    first_run = ProgressWriter(str(tmp_path), 400, interval=3600)
    first_run.update(step=0, resumed_from_step=None)
    first_run.update(step=10)
    assert first_run.record.first_step_time == first_run.record.step_time is not None

    resumed = ProgressWriter(str(tmp_path), 400, interval=3600)   # the next attempt, same model_dir
    assert resumed.record.step == 10 and resumed.record.first_step_time is None
    resumed.update(step=0, resumed_from_step=0, checkpoint_step=None)   # restored: nothing trained yet
    assert resumed.record.first_step_time is None
    resumed.update(step=10)
    first = resumed.record.first_step_time
    assert first == resumed.record.step_time
    resumed.update(step=20)
    assert resumed.record.first_step_time == first and resumed.record.step_time >= first
    assert progress.read(str(tmp_path)).first_step_time == first
