"""The caps' decision, the spend accounting and the live pace (provision.runs.caps, .pace), on numbers
and a simulated clock."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from provision.basics.errors import UsageError
from provision.runs import caps, pace
from provision.sweeps import budget

T0 = 1_800_000_000.0
HOURLY = 3.6          # $0.001 a second


def _look(**kw) -> caps.Looked:
    base = {"now": T0 + 1000, "spent_usd": 1.0, "hourly_usd": HOURLY, "steps_per_sec": 1.0, "step": 450,
            "num_train_steps": 10_000, "save_checkpoints_steps": 100, "stop_s": 60.0}
    return caps.Looked(**{**base, **kw})


def test_one_accounting_for_runs_and_sweeps():
    assert caps.usd(3.6, 1000) == pytest.approx(1.0)
    assert caps.usd(3.6, -5) == 0.0
    assert budget.trial_usd(3.6, 1000) == caps.usd(3.6, 1000)


@pytest.mark.parametrize(("spent", "rate", "step", "verdict"), [
    # next checkpoint at 500: 50 s away at 1 step/s, plus a 60 s stop: $0.11 more
    (1.88, 1.0, 450, caps.Verdict.CONTINUE),   # 1.99 <= 2
    (1.90, 1.0, 450, caps.Verdict.STOP),       # 2.01 > 2
    (1.88, 0.5, 450, caps.Verdict.STOP),       # 100 s to the checkpoint at half the speed
    (1.93, 1.0, 499, caps.Verdict.CONTINUE),   # the checkpoint is 1 s away
    (1.93, None, 450, caps.Verdict.CONTINUE),  # no rate yet: only the stop's own time counts
    (1.95, None, 450, caps.Verdict.STOP),
])
def test_the_budget_stops_the_run_before_the_next_checkpoint_would_pass_it(spent, rate, step, verdict):
    d = caps.decide(caps.Caps(budget_usd=2.0, started_at=T0), _look(spent_usd=spent, steps_per_sec=rate, step=step),
                    warned=frozenset({"budget"}))
    assert d.verdict == verdict, d
    if verdict == caps.Verdict.STOP:
        assert d.kind == "budget" and d.reason.startswith(f"budget: ${spent:.4f} of $2 spent")


def test_the_budget_warns_once_at_80_percent():
    c = caps.Caps(budget_usd=10.0, started_at=T0)
    assert caps.decide(c, _look(spent_usd=7.9)).verdict == caps.Verdict.CONTINUE
    d = caps.decide(c, _look(spent_usd=8.0))
    assert d.verdict == caps.Verdict.WARN and d.kind == "budget" and "80% of the $10 budget" in d.reason
    assert caps.decide(c, _look(spent_usd=8.5), warned=frozenset({"budget"})).verdict == caps.Verdict.CONTINUE


@pytest.mark.parametrize(("now", "rate", "step", "verdict", "words"), [
    (T0 + 1000, 1.0, 450, caps.Verdict.CONTINUE, ""),          # 9550 steps take 9550 s of the 10050 left
    (T0 + 1000, 0.5, 450, caps.Verdict.STOP, "take 5h18m, 2h30m past the deadline"),   # at half the speed
    (T0 + 1000, None, 450, caps.Verdict.CONTINUE, ""),         # no rate yet: nothing to judge by
    (T0 + 11_000, None, 450, caps.Verdict.STOP, "reached"),     # within the stop's time of it
])
def test_the_deadline_stops_a_run_that_cannot_make_it(now, rate, step, verdict, words):
    c = caps.Caps(deadline=T0 + 11_050, started_at=T0)
    d = caps.decide(c, _look(now=now, steps_per_sec=rate, step=step), warned=frozenset({"deadline"}))
    assert d.verdict == verdict, d
    if verdict == caps.Verdict.STOP:
        assert d.kind == "deadline" and words in d.reason


def test_the_deadline_warns_once_80_percent_of_the_time_is_gone():
    c = caps.Caps(deadline=T0 + 100_000, started_at=T0)
    fast = {"steps_per_sec": 100.0}
    assert caps.decide(c, _look(now=T0 + 79_000, **fast)).verdict == caps.Verdict.CONTINUE
    d = caps.decide(c, _look(now=T0 + 80_000, **fast))
    assert d.verdict == caps.Verdict.WARN and d.kind == "deadline"
    assert caps.decide(c, _look(now=T0 + 90_000, **fast), warned=frozenset({"deadline"})).verdict == \
        caps.Verdict.CONTINUE


def test_the_projection_crossing_a_cap_is_said_once_each_way():
    c = caps.Caps(budget_usd=5.0, deadline=T0 + 3600, started_at=T0)
    first = caps.crossings(c, projected_usd=6.0, projected_end=T0 + 4000, over={})
    assert [(k, o) for k, o, _ in first] == [("budget", True), ("deadline", True)]
    assert caps.crossings(c, projected_usd=6.5, projected_end=T0 + 4100, over={"budget": True, "deadline": True}) == []
    back = caps.crossings(c, projected_usd=4.0, projected_end=T0 + 3000, over={"budget": True, "deadline": True})
    assert [(k, o) for k, o, _ in back] == [("budget", False), ("deadline", False)]
    assert "back within the $5 budget" in back[0][2]


def test_bad_caps_are_refused_before_anything_starts():
    check = {"now": T0, "usd_per_hour": 1.35, "accelerator_type": "v2-8"}
    with pytest.raises(UsageError, match="leaves nothing to spend"):
        caps.check(0.0, None, **check)
    with pytest.raises(UsageError, match="leaves nothing to spend"):
        caps.check(-1.0, None, **check)
    with pytest.raises(UsageError, match="is in the past"):
        caps.check(None, "2020-01-01T00:00", **check)
    with pytest.raises(UsageError, match="not a date and time"):
        caps.check(None, "next friday", **check)
    with pytest.raises(UsageError, match="does not cover the 60 s a stop takes on a v2-8"):
        caps.check(0.02, None, **check)                       # $1.35/h: a stop alone costs $0.0225
    with pytest.raises(UsageError, match="no price is known for v9-8"):
        caps.check(5.0, None, now=T0, usd_per_hour=0.0, accelerator_type="v9-8")
    ok = caps.check(5.0, "2027-03-01T08:00:00+00:00", **check)
    assert ok.budget_usd == 5.0 and ok.deadline == 1803888000.0 and ok.started_at == T0
    assert caps.check(None, "2027-03-01T08:00:00Z", **check).deadline == 1803888000.0


def _progress(step: int, at: float, *, started: float, first: float | None, resumed: int | None = None) -> dict:
    return {"step": step, "step_time": at, "started_at": started, "first_step_time": first,
            "resumed_from_step": resumed}


def test_the_meter_leaves_out_warm_up_and_restores():
    m = None
    # process 1: started at T0, compiles until T0+60 (first step), then 10 steps/s
    m = pace.meter(m, _progress(0, T0, started=T0, first=None))                 # not trained yet
    assert pace.steps_per_sec(m) is None
    m = pace.meter(m, _progress(100, T0 + 70, started=T0, first=T0 + 60))      # anchor after the first loop
    assert pace.steps_per_sec(m) is None
    m = pace.meter(m, _progress(300, T0 + 90, started=T0, first=T0 + 60))
    assert pace.steps_per_sec(m) == pytest.approx(10.0)
    m = pace.meter(m, _progress(300, T0 + 90, started=T0, first=T0 + 60))      # the same look again: nothing
    # preempted; process 2 restores step 200 and compiles for 100 s: none of it counts
    m = pace.meter(m, _progress(300, T0 + 90, started=T0 + 300, first=None))     # the old record, new process
    m = pace.meter(m, _progress(250, T0 + 420, started=T0 + 300, first=T0 + 410, resumed=200))
    m = pace.meter(m, _progress(350, T0 + 440, started=T0 + 300, first=T0 + 410, resumed=200))
    assert (m["steps"], m["seconds"]) == (300, 40.0)
    assert pace.steps_per_sec(m) == pytest.approx(7.5)
    assert m["warmups"] == [60.0, 110.0]             # each start's seconds to its first step, kept apart


def test_the_projection_and_how_it_moved():
    p = pace.project(now=T0, step=1000, num_train_steps=4600, rate=1.0, hourly_usd=3.6, spent_usd=2.0,
                     per_hour=0.0, recovery_s=0.0, checkpoint_steps=100)
    assert (p.remaining_s, p.eta, p.projected_usd) == (3600.0, T0 + 3600, pytest.approx(5.6))
    spot = pace.project(now=T0, step=1000, num_train_steps=4600, rate=1.0, hourly_usd=3.6, spent_usd=2.0,
                        per_hour=1.0, recovery_s=550.0, checkpoint_steps=100)
    assert spot.remaining_s == pytest.approx(4320.0)       # 1/h x (550 s + 50 steps): / (1 - 1/6)
    assert pace.project(now=T0, step=0, num_train_steps=10, rate=None, hourly_usd=1, spent_usd=0, per_hour=0,
                        recovery_s=0, checkpoint_steps=1).eta is None
    history: list = []
    for i in range(200):
        history = pace.remember(history, pace.project(now=T0 + i, step=i, num_train_steps=1000, rate=1.0 + i / 100,
                                                      hourly_usd=3.6, spent_usd=i / 1000, per_hour=0, recovery_s=0,
                                                      checkpoint_steps=10))
    assert len(history) <= pace.KEPT and history[0]["t"] == T0 and history[-1]["t"] == T0 + 199
    moved = pace.moved(history)
    assert moved["eta_first"] == T0 + 1000 and moved["eta_shift_s"] < 0 and moved["usd_shift"] < 0


def _rec(**kw) -> SimpleNamespace:
    base = {"pace": {"usd_by_state": {"starting": 0.01, "training": 0.5}}, "last_progress": None,
            "pricing": {"usd_per_hour": 3.6, "interruptions_per_hour": 0.0, "recovery_s": 0.0},
            "num_train_steps": 10_000, "save_checkpoints_steps": 100, "budget_usd": None, "deadline": None,
            "created_at": T0}
    return SimpleNamespace(**{**base, **kw})


def test_a_look_warns_crosses_and_stops_in_the_supervisors_order():
    rec = _rec(budget_usd=0.6)
    rec.last_progress = _progress(100, T0 + 100, started=T0, first=T0 + 50)
    rec.pace, events, stop = pace.look(rec, now=T0 + 100, finished=False, stop_s=10)
    assert stop is None and [e for e, _ in events] == ["cap_warning"]        # $0.51 of $0.6: 85 %
    rec.last_progress = _progress(1100, T0 + 200, started=T0, first=T0 + 50)     # 10 steps/s
    rec.pace, events, stop = pace.look(rec, now=T0 + 200, finished=False, stop_s=10)
    assert [(e, d["cap"], d["over"]) for e, d in events] == [("projection_crossed", "budget", True)]
    assert stop is None                                      # $0.51 + 10 s to the checkpoint + a 10 s stop
    rec.pace["usd_by_state"]["training"] = 0.58
    rec.pace, events, stop = pace.look(rec, now=T0 + 210, finished=False, stop_s=10)
    assert stop is not None and stop.kind == "budget" and events == []
    # a run that finished at this look is never stopped
    assert pace.look(rec, now=T0 + 210, finished=True, stop_s=10)[2] is None


def test_the_summary_compares_the_estimate_with_what_the_run_took():
    rec = _rec(live=False, step=500, seconds_by_state={"starting": 10.0, "training": 500.0, "waiting": 100.0},
               estimate={"total_s": 1000.0, "total_usd": 1.0, "steps": 1000}, budget_usd=5.0, deadline=None,
               stopped_by=None)
    s = pace.summary(rec)
    vs = s["vs_estimate"]
    assert (vs["steps"], vs["estimate_s"], vs["actual_s"]) == (500, 500.0, 600.0)
    assert vs["time_error"] == pytest.approx(-1 / 6, abs=1e-4) and vs["starting_s"] == 10.0
    assert s["spent_usd"] == pytest.approx(0.51) and s["eta"] is None


def test_a_deadline_within_a_stop_and_a_look_is_refused_and_deadlines_show_their_seconds():
    """A deadline closer than a stop can be made is refused up front, not accepted only to stop the
    run at step 0 (30 s ahead was)."""
    check = {"now": T0, "usd_per_hour": 1.35, "accelerator_type": "v2-8"}
    soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(T0 + 30))
    with pytest.raises(UsageError) as refused:
        caps.check(None, soon, **check)
    assert refused.value.one_line() == (
        f"--deadline {soon} is 30 s away, within the 70 s a stop and a look take: the run would be stopped at "
        f"once; give a deadline more than 70 s ahead, e.g. --deadline "
        f"{time.strftime('%Y-%m-%dT%H:%M', time.localtime(T0 + 86400))}")
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(T0 + 71))
    assert caps.check(None, later, **check).deadline == T0 + 71
    assert caps.show_deadline(T0 + 71) == time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(T0 + 71))
    assert caps.show_deadline(T0 + 71)[-9:-4] == time.strftime("%M:%S", time.localtime(T0 + 71))


def test_an_estimate_under_a_second_stored_earlier_is_not_compared():
    """An estimate under a second is no estimate, so a stored one is not compared: status said
    "0s vs 30s (estimate -100%)"."""
    rec = _rec(live=False, step=300, seconds_by_state={"training": 30.0}, estimate={"total_s": 0.0,
               "total_usd": 0.0, "steps": 300}, budget_usd=None, deadline=None, stopped_by=None)
    assert pace.summary(rec)["vs_estimate"] is None


@pytest.mark.parametrize(("stopped_by", "progress", "hint"), [
    ("deadline", None, ("it reported no checkpoint before it stopped, and its TPU was deleted: to start again, "
                       "tpuctl up lab, then tpuctl train lab with a larger cap")),
    ("budget", {"step": 120, "checkpoint_step": 100},
     ("its checkpoint of step 100 is in gs://b/m and its TPU was deleted: to go on, tpuctl up lab, then tpuctl "
     "train lab with --set model_dir=gs://b/m and a larger cap")),
    (None, {"step": 3}, "see tpuctl logs lab-1; it reported no checkpoint"),
    (None, {"step": 3, "checkpoint_step": 0}, "see tpuctl logs lab-1; its checkpoint of step 0 is kept in gs://b/m"),
])
def test_the_end_of_a_run_names_a_checkpoint_only_where_one_was_reported(stopped_by, progress, hint):
    """A user told where a checkpoint is goes to look for it: a run stopped at step 0 names none
    ("its checkpoint is in gs://..." with nothing there)."""
    from provision.commands.train import _ended_hint

    rec = SimpleNamespace(run_id="lab-1", cluster="lab", model_dir="gs://b/m", stopped_by=stopped_by,
                          last_progress=progress)
    assert _ended_hint(rec) == hint
