"""``tpuctl status`` shows a SQuAD run's official EM and F1 (from progress.json's final metrics)."""

from __future__ import annotations

from provision.commands.status import _run_row

ROW = {"run_id": "r1", "cluster": "c", "status": "finished", "step": 5474, "num_train_steps": 5474,
       "loss": 0.9, "examples_per_sec": 300.0, "preemptions": 1, "failures": 0, "steps_lost": 10,
       "seconds_lost": 30.0}


def test_run_row_shows_exact_match_and_f1_when_the_run_has_them():
    row = _run_row({**ROW, "exact_match": 80.94, "f1": 88.456})
    assert row[2] == "finished (EM 80.9, F1 88.5)"
    assert _run_row(ROW)[2] == "finished"   # other jobs: unchanged
