"""Goodput and badput by cause (provision.runs.goodput) on a hand-built timeline: a run preempted
twice, once with the notice (it checkpointed inside it) and once hard (steps redone), on a fake
clock. Every category equals the timeline to the second, and they sum to the wall time."""

from __future__ import annotations

import itertools

import pytest

from provision.runs import goodput
from provision.runs.goodput import Billed

RATE = 3.6          # $/hour: $0.001 a second

# the timeline (seconds from 1000):
#   1000 run created; 1004 the TPU is READY (created for the run); 1010 attempt 1 handed to the hosts
#   1013 program starts, 1020 step 1, a step every 10 s; step 6 at 1070; the notice; it saves at step
#        6 and exits (42, after SIGTERM) at 1075; 1078 the supervisor sees it
#   1090 a recreate fails (stockout); 1095-1120 the recreate; 1122 attempt 2
#   1125 program starts, restores step 6; 1140 step 7 (first new step); step 8 (a checkpoint) at 1150,
#        step 10 at 1170; the power-off, no notice; 1180 seen; resumed at step 8: 2 steps redone
#   1185-1200 the recreate; 1201 attempt 3; 1203 program starts; 1210 step 9; step 20 at 1320,
#        the job exits 0 at 1325; 1330 the supervisor sees it finished
EVENTS = [
    {"time": 1010, "event": "attempt_started", "attempt": 1},
    {"time": 1078, "event": "preempted", "preemption": 1, "step": 6, "checkpoint_step": 6, "attempt": 1,
     "program_started_at": 1013, "first_step_at": 1020, "step_at": 1070, "cause": "the job exited 42"},
    {"time": 1090, "event": "recreate_failed", "error": "stockout"},
    {"time": 1120, "event": "recreated", "seconds": 25},
    {"time": 1122, "event": "attempt_started", "attempt": 2},
    {"time": 1141, "event": "resumed", "step": 6, "steps_lost": 0, "seconds_lost": 62, "preemptions": [1],
     "program_started_at": 1125},
    {"time": 1180, "event": "preempted", "preemption": 2, "step": 10, "checkpoint_step": 8, "attempt": 2,
     "program_started_at": 1125, "first_step_at": 1140, "step_at": 1170, "cause": "the TPU was PREEMPTED"},
    {"time": 1200, "event": "recreated", "seconds": 15},
    {"time": 1201, "event": "attempt_started", "attempt": 3},
    {"time": 1212, "event": "resumed", "step": 8, "steps_lost": 2, "seconds_lost": 30, "preemptions": [2],
     "program_started_at": 1203},
    {"time": 1330, "event": "finished", "step": 20},
]
CURVE = [{"t": 1010 + 10 * k, "step": k} for k in range(1, 7)] + \
    [{"t": 1140 + 10 * (k - 7), "step": k} for k in range(7, 11)] + \
    [{"t": 1210, "step": 9}, {"t": 1250, "step": 13}, {"t": 1320, "step": 20}]
RECORD = {"run_id": "r", "created_at": 1000.0, "ended_at": 1330.0, "status": "finished", "curve": CURVE,
          "last_progress": {"step": 20, "started_at": 1203, "first_step_time": 1210, "step_time": 1320}}
EXITS = {1: {"0": {"code": 42, "time": 1075, "after_sigterm": True, "program_code": 0}},
         3: {"0": {"code": 0, "time": 1325}}}
BILLED = [Billed(1004, 1080, RATE), Billed(1110, 1175, RATE), Billed(1195, 1330, RATE)]

EXPECTED = {"goodput": 50 + 10 + 110, "provisioning": 4 + 12 + 25 + 15, "billed_no_job": 6 + 5,
            "host_bootstrap": 3 + 3 + 2, "program_startup": 7 + 15 + 7, "data_loading": 0, "checkpoint_save": 5,
            "wasted_progress": 20, "disruption": 3 + 5 + 2 + 5 + 1, "training_no_progress": 0, "unattributed": 10 + 5}


def _g(**kw):
    return goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=BILLED, **kw)


def test_every_category_equals_the_timeline_to_the_second_and_they_sum_to_the_wall_time():
    g = _g()
    got = {k: v["seconds"] for k, v in g["categories"].items()}
    assert got == EXPECTED
    assert g["wall_s"] == 330 == sum(got.values())
    assert g["goodput_s"] == 170 and g["badput_s"] == 160
    assert g["goodput_pct"] == pytest.approx(100 * 170 / 330, abs=0.01)
    # the segments tile the wall with no gap and no overlap
    segs = g["segments"]
    assert segs[0][0] == 1000 and segs[-1][1] == 1330
    assert all(a[1] == b[0] for a, b in itertools.pairwise(segs))


def test_dollars_are_the_billed_seconds_of_each_category_at_the_runs_price():
    g = _g()
    usd = {k: v["usd"] for k, v in g["categories"].items()}
    # billed: 1078-1080 (the first TPU until its power-off), 1110-1120 and 1195-1200 (the new ones)
    assert usd["provisioning"] == pytest.approx(0.001 * (0 + 2 + 10 + 5))
    assert usd["billed_no_job"] == pytest.approx(0.011)
    assert usd["goodput"] == pytest.approx(0.170)
    assert usd["unattributed"] == pytest.approx(0.001 * (5 + 5))      # 1170-1175 billed, then the TPU was gone
    assert g["badput_usd"] == pytest.approx(sum(v for k, v in usd.items() if k != "goodput"))
    assert g["total_usd"] == pytest.approx(0.001 * (76 + 65 + 135))


def test_each_preemption_is_broken_down_by_phase():
    first, second = _g()["preemptions"]
    phases = {p["phase"]: p["seconds"] for p in first["phases"]}
    assert first["notice"] is True and first["checkpointed_in_notice"] is True and first["steps_redone"] == 0
    assert phases == {"notice to job exit": None, "last step to job exit": 5, "job exit to preemption seen": 3,
                      "seen to recreate started": 17, "of which failed recreates (capacity, quota)": 12,
                      "recreate": 25, "recreated to attempt started": 2, "host bootstrap": 3,
                      "program start and restore to first step": 15}
    assert first["recovery_s"] == 62 and first["wasted_s"] == 0
    phases = {p["phase"]: p["seconds"] for p in second["phases"]}
    assert second["notice"] is False and second["checkpointed_in_notice"] is None
    assert (second["steps_redone"], second["wasted_s"], second["recovery_s"]) == (2, 20, 30)
    assert phases == {"notice to job exit": None, "last step to job exit": None,
                      "job exit to preemption seen": None, "seen to recreate started": 5, "recreate": 15,
                      "recreated to attempt started": 1, "host bootstrap": 2,
                      "program start and restore to first step": 7}


def test_a_live_run_counts_until_now_and_the_step_in_progress_is_not_guessed():
    record = {**RECORD, "ended_at": None, "status": "running"}
    events = [e for e in EVENTS if e["event"] != "finished"]
    g = goodput.breakdown(record, events, now=1340.0, exits={1: EXITS[1]}, billed=BILLED)
    got = {k: v["seconds"] for k, v in g["categories"].items()}
    assert g["wall_s"] == 340 == pytest.approx(sum(got.values()))
    assert got["goodput"] == 170 and got["unattributed"] == 10 + 20 and got["billed_no_job"] == 6


def test_without_billing_records_there_are_no_dollars_and_the_start_is_unattributed():
    g = goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=None)
    assert g["badput_usd"] is None and g["categories"]["goodput"]["usd"] is None
    assert g["categories"]["unattributed"]["seconds"] == 15 + 10
    assert g["wall_s"] == pytest.approx(sum(v["seconds"] for v in g["categories"].values()))


def test_a_program_that_reports_no_step_is_training_without_progress_from_its_start_to_its_exit():
    record = {"created_at": 0.0, "ended_at": 100.0, "status": "finished",
              "last_progress": {"started_at": 15, "progress_reported": False}}
    events = [{"time": 10, "event": "attempt_started", "attempt": 1}, {"time": 100, "event": "finished"}]
    g = goodput.breakdown(record, events, now=200.0, exits={1: {"0": {"code": 0, "time": 95}}},
                          billed=[Billed(0, 100, RATE)])
    got = {k: v["seconds"] for k, v in g["categories"].items() if v["seconds"]}
    assert got == {"billed_no_job": 10 + 5, "host_bootstrap": 5, "training_no_progress": 80}
    assert g["goodput_pct"] == 0
    said = goodput.lines(g, duration=lambda s: f"{s:g}s", usd=lambda u: f"${u:.2f}")
    assert said[2].startswith("  training (no progress reported) 80s: the program reported no step"), said


def test_a_silent_program_hard_killed_ran_until_its_last_heartbeat_and_the_power_off_is_unattributed():
    record = {"created_at": 0.0, "ended_at": None, "status": "running",
              "last_progress": {"started_at": 115, "progress_reported": False}}
    events = [{"time": 10, "event": "attempt_started", "attempt": 1},
              {"time": 60, "event": "preempted", "preemption": 1, "step": "unknown", "program_started_at": 15},
              {"time": 70, "event": "recreated", "seconds": 5},
              {"time": 110, "event": "attempt_started", "attempt": 2},
              {"time": 116, "event": "resumed", "step": "unknown", "seconds_lost": 55, "program_started_at": 115}]
    alive = {1: {"0": {"time": 50}}}
    g = goodput.breakdown(record, events, now=130.0, exits={}, alive=alive, billed=None)
    got = {k: v["seconds"] for k, v in g["categories"].items() if v["seconds"]}
    assert got["training_no_progress"] == (50 - 15) + (130 - 115)      # never the recovery between them
    assert got["unattributed"] == 10 + (60 - 50)          # before the first attempt (no billing records); power-off
    assert g["goodput_s"] == 0 and g["wall_s"] == pytest.approx(sum(got.values()))


def test_making_data_on_the_host_is_data_loading():
    record = {**RECORD, "last_progress": {**RECORD["last_progress"], "data_creation": [[1250, 1270]]}}
    g = goodput.breakdown(record, EVENTS, now=5000.0, exits=EXITS, billed=BILLED)
    assert g["categories"]["data_loading"]["seconds"] == 20
    assert g["categories"]["goodput"]["seconds"] == 150
    assert g["wall_s"] == pytest.approx(sum(v["seconds"] for v in g["categories"].values()))


def test_the_compact_block_names_goodput_the_top_causes_the_startup_and_each_preemption():
    text = goodput.lines(_g(), duration=lambda s: f"{s:g}s", usd=lambda v: f"${v:.3f}")
    assert text[0] == "goodput 51.5% (170s of 330s); badput 160s, $0.106"
    assert text[1] == "  badput: provisioning 56s $0.017, program_startup 29s $0.029, wasted_progress 20s $0.020"
    assert text[2] == ("  startup 20s to the first step: run created to attempt started 10s, attempt started to "
                       "program start 3s, program start to first step 7s; slowest: run created to attempt started")
    assert text[3].startswith("  preemption 1 (notice, checkpointed in it; 0 steps redone): last step to job exit 5s")
    assert text[4].startswith("  preemption 2 (no notice seen; 2 steps redone): seen to recreate started 5s")
