"""The page's documents from records a bucket writer may have filled: pure and defensive."""

from __future__ import annotations

from provision.runs.curve import added, point
from provision.ui import shape


def test_the_lost_time_runs_from_the_preemption_to_the_first_new_step():
    evs = shape.events([{"time": 100, "event": "preempted", "step": 50}, {"time": 101, "event": "preempted"},
                        {"time": 160, "event": "recreated"}, {"time": 190, "event": "resumed", "seconds_lost": 85.0,
                                                               "steps_lost": 10},
                        {"time": 300, "event": "preempted"}])
    assert shape.outages(evs) == [{"start": 100, "end": 185.0, "preemptions": 2, "step": 50.0, "steps_lost": 10.0},
                                  {"start": 300, "end": None, "preemptions": 1, "step": None}]


def test_odd_records_give_a_document_not_an_error():
    rec = {"run_id": ["x"], "status": {"a": 1}, "last_progress": "nope", "curve": [{"step": "1"}, 5, {"step": 3.0}],
           "seconds_by_state": {"training": 7200, "waiting": -5, "x" * 100: float("inf")}, "estimate": {"eta": 5}}
    evs = [{"time": "soon", "event": "preempted"}, {"time": 1.0, "event": {"x": 1}}, "garbage",
           {"time": 2.0, "event": "finished", "nested": {"a": 1}, "step": float("nan"), "reason": "ok"}]
    doc = shape.run_document(rec, evs, hourly_usd=2.0, accelerator_type="v3-8")
    assert doc["run_id"] is None and doc["status"] is None and doc["step"] is None
    assert doc["curve"] == [{"step": 3.0, "t": None, "m": {}}]
    assert doc["events"] == [{"time": 2.0, "event": "finished", "fields": {"reason": "ok"}}]
    assert doc["spend"] == {"by_state": [{"state": "training", "seconds": 7200.0, "usd": 4.0}], "hourly_usd": 2.0,
                            "total_usd": 4.0}
    assert doc["estimate"] == {"estimate": {"eta": 5.0}}


def test_the_best_trial_follows_the_goal_and_unscored_trials_are_never_best():
    trials = [{"trial": 0, "metric": 0.3, "params": {"lr": 1e-3}}, {"trial": 1, "metric": 0.1, "params": {"lr": 1e-2}},
              {"trial": 2, "metric": None, "params": {"lr": "<b>x</b>"}}]
    up = shape.sweep_document({"spec": {"goal": "maximize", "metric": "acc"}}, trials)
    down = shape.sweep_document({"spec": {"goal": "minimize", "metric": "loss"}}, trials)
    assert (up["best"], down["best"]) == (0, 1) and [t["best"] for t in down["trials"]] == [False, True, False]
    assert up["params"] == ["lr"] and up["trials"][2]["params"] == {"lr": "<b>x</b>"}   # text: the page escapes


def test_the_curve_keeps_its_shape_in_a_bounded_number_of_points():
    curve: list = []
    for step in range(1, 1001):
        curve = added(curve, point({"step": step, "loss": 1 / step, "step_time": step, "metrics": {"acc": 0.5}}),
                      max_points=50)
    assert len(curve) <= 50 and curve[0]["step"] == 1 and curve[-1]["step"] == 1000
    assert added(curve, point({"step": 1000, "loss": 0.5}))[-1]["loss"] == 0.5      # a repeat replaces
    assert point({"step": None}) is None and added([], None) == []
