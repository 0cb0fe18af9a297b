"""The page's documents from records a bucket writer may have filled: pure and defensive."""

from __future__ import annotations

from dataclasses import replace

import pytest

from provision.runs import store
from provision.runs.curve import added, point
from provision.runs.estimate import Estimate
from provision.ui import shape

MADE_AT = 1_795_780_800.0


def _estimate(**kw) -> dict:
    """What provision.runs.forecast stores in a run's record: Estimate.to_dict() and when it was made."""
    est = Estimate(accelerator_type="v2-8", zone="us-central1-b", region="us-central1", tier="preemptible",
                   usd_per_hour=1.35, steps=300, steps_per_sec=0.0806, speed_source="measured", compute_s=3720.0,
                   interruptions=0.347, overhead_s=5.0, total_s=3725.0, total_usd=1.234,
                   basis=("measured: 0.0806 steps/s over 900 steps", "price: $1.35/h"), cheapest=True)
    return {**replace(est, **kw).to_dict(), "at": MADE_AT}


def test_the_lost_time_runs_from_the_preemption_to_the_first_new_step():
    evs = shape.events([{"time": 100, "event": "preempted", "step": 50}, {"time": 101, "event": "preempted"},
                        {"time": 160, "event": "recreated"}, {"time": 190, "event": "resumed", "seconds_lost": 85.0,
                                                               "steps_lost": 10},
                        {"time": 300, "event": "preempted"}])
    assert shape.outages(evs) == [{"start": 100, "end": 185.0, "preemptions": 2, "step": 50.0, "steps_lost": 10.0},
                                  {"start": 300, "end": None, "preemptions": 1, "step": None}]


def test_odd_records_give_a_document_not_an_error():
    rec = {"run_id": ["x"], "status": {"a": 1}, "last_progress": "nope", "curve": [{"step": "1"}, 5, {"step": 3.0}],
           "seconds_by_state": {"training": 7200, "waiting": -5, "x" * 100: float("inf")}, "estimate": {"eta": 5},
           "pace": {"projections": "x"}}
    evs = [{"time": "soon", "event": "preempted"}, {"time": 1.0, "event": {"x": 1}}, "garbage",
           {"time": 2.0, "event": "finished", "nested": {"a": 1}, "step": float("nan"), "reason": "ok"}]
    doc = shape.run_document(rec, evs, hourly_usd=2.0, accelerator_type="v3-8")
    assert doc["run_id"] is None and doc["status"] is None and doc["step"] is None
    assert doc["curve"] == [{"step": 3.0, "t": None, "m": {}}]
    assert doc["events"] == [{"time": 2.0, "event": "finished", "fields": {"reason": "ok"}}]
    assert doc["spend"] == {"by_state": [{"state": "training", "seconds": 7200.0, "usd": 4.0}], "hourly_usd": 2.0,
                            "total_usd": 4.0}
    assert doc["estimate"] is None and doc["pace"] is None      # no field of an estimate: no card, no dump


def test_the_estimate_card_holds_what_a_person_reads_and_nothing_else():
    card = shape.estimate(_estimate())
    assert card == {"made": True, "finishes": True, "total_s": 3725.0, "total_usd": 1.234, "accelerator_type": "v2-8",
                    "tier": "preemptible", "zone": "us-central1-b", "steps": 300.0, "steps_per_sec": 0.0806,
                    "usd_per_hour": 1.35, "speed_source": "measured", "interruptions": 0.347, "overhead_s": 5.0,
                    "basis": ["measured: 0.0806 steps/s over 900 steps", "price: $1.35/h"], "input_note": None,
                    "at": MADE_AT}
    # the bookkeeping the page has no use for (which candidate was cheapest, the steps' share) stays out
    assert not {"cheapest", "fastest", "compute_s", "region"} & set(card)


def test_an_estimate_that_could_not_be_made_says_why():
    why = "the measured 5000 steps/s puts 300 steps under a second"
    assert shape.estimate({"none": why, "at": MADE_AT}) == {"made": False, "why": why, "at": MADE_AT}
    # one kept from before tpuctl stopped making estimates under a second: no basis, so none
    old = shape.estimate(_estimate(total_s=0.4, total_usd=0.0001))
    assert old is not None and old["made"] is False and "under a second" in old["why"]


def test_an_estimate_interrupted_faster_than_it_recovers_never_finishes():
    card = shape.estimate(_estimate(total_s=float("inf"), total_usd=float("inf")))
    assert card is not None and card["made"] and not card["finishes"] and card["total_usd"] is None


@pytest.mark.parametrize("raw", [None, "1h", {"eta": 5}, {"total_s": "1h"}, {"accelerator_type": "v2-8"}])
def test_a_record_without_an_estimate_gives_no_card(raw):
    assert shape.estimate(raw) is None


def test_what_a_bucket_writer_put_in_an_estimate_is_bounded_text():
    card = shape.estimate({**_estimate(), "speed_source": "<b>fast</b>", "basis": ["x" * 1000, {"a": 1}, 5, ""] + ["y"] * 20,
                           "total_usd": float("nan")})
    assert card is not None
    assert card["speed_source"] is None and card["total_usd"] is None
    assert card["basis"][0] == "x" * shape.MAX_TEXT and len(card["basis"]) == shape.MAX_BASIS and card["basis"][1:] == ["y"] * (shape.MAX_BASIS - 1)


def test_the_eta_shows_while_the_run_lives_and_the_caps_always():
    rec = {"status": "running", "budget_usd": 20.0, "deadline": MADE_AT + 86400,
           "pace": {"projections": [{"t": 1.0, "eta": MADE_AT, "projected_usd": 3.5}]}}
    assert shape.pace(rec) == {"eta": MADE_AT, "projected_usd": 3.5, "budget_usd": 20.0, "deadline": MADE_AT + 86400,
                               "stopped_by": None}
    ended = shape.pace({**rec, "status": "finished", "stopped_by": "budget"})
    assert ended is not None and ended["eta"] is None and ended["stopped_by"] == "budget"
    assert shape.LIVE == store.LIVE


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


def test_the_goodput_block_is_the_breakdown_with_every_value_checked():
    from provision.runs import goodput
    from tests.unit.test_goodput import BILLED, EVENTS, EXITS, EXPECTED, RECORD

    g = goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=BILLED)
    b = shape.goodput_block(g)
    assert [c["key"] for c in b["categories"]] == list(goodput.KEYS)
    assert {c["key"]: c["seconds"] for c in b["categories"]} == EXPECTED
    assert (b["pct"], b["goodput_s"], b["wall_s"], b["badput_s"]) == (g["goodput_pct"], 170, 330, 160)
    assert [p["preemptions"] for p in b["preemptions"]] == [[1], [2]]
    assert [(p["notice"], p["checkpointed_in_notice"], p["steps_redone"]) for p in b["preemptions"]] == \
        [(True, True, 0), (False, None, 2)]
    assert [ph["phase"] for ph in b["preemptions"][0]["phases"] if ph["recorded"]][:2] == \
        ["last step to job exit", "job exit to preemption seen"]
    assert b["segments"] == g["segments"]


def test_an_odd_goodput_record_gives_a_bounded_block_or_none():
    assert shape.goodput_block(None) is None and shape.goodput_block({"wall_s": "x"}) is None
    b = shape.goodput_block({"wall_s": 10.0, "goodput_pct": float("nan"), "categories": {"goodput": {"seconds": "5"},
                             "evil<script>": {"seconds": 1}}, "preemptions": [5, {"preemptions": ["x", 2], "notice": 1,
                             "phases": [{"phase": "recreate", "recorded": True, "seconds": "3"}, {"phase": 7}],
                             "cause": "c" * 500}], "segments": [[0, 5, "goodput"], [5, 10, "<img>"], ["a", 1, "goodput"]]})
    assert b["pct"] is None and b["categories"][0]["key"] == "goodput" and b["categories"][0]["seconds"] == 0
    assert "evil<script>" not in {c["key"] for c in b["categories"]}
    [p] = b["preemptions"]
    assert p["preemptions"] == [2] and p["notice"] is None and len(p["cause"]) == 120
    assert p["phases"] == [{"phase": "recreate", "recorded": False, "seconds": None, "from": None, "to": None}]
    assert b["segments"] == [[0.0, 5.0, "goodput"]]


def test_a_run_whose_cluster_has_no_tpu_in_the_ledgers_has_no_dollars_not_zero():
    b = shape.goodput_block({"wall_s": 10.0, "badput_usd": None, "no_tpu_recorded": True,
                             "categories": {"provisioning": {"seconds": 10.0, "usd": 0.0}}})
    assert b["no_tpu_recorded"] is True and {c["usd"] for c in b["categories"]} == {None}
