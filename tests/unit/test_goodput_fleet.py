"""What a run keeps of its goodput (provision.runs.goodput.summary), a fleet's view of those
summaries (goodput.fleet), and the estimate's recovery time measured from them
(provision.runs.history.median_recovery). Pure: the timeline is test_goodput's, on a fake clock."""

from __future__ import annotations

import json

import pytest

from provision.catalog import performance
from provision.runs import goodput, history
from provision.runs.goodput import Billed
from provision.runs.store import SUMMARY_MAX, record_summary
from tests.unit.test_goodput import BILLED, EVENTS, EXITS, RECORD


def _g(**kw):
    return goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=BILLED, **kw)


def test_the_loss_to_preemption_is_the_redone_steps_the_downtime_and_the_recreates_wait():
    loss = _g()["preemption_loss"]
    # preemption 1 (attempt 1 to 2): exit 1075 to seen 1078, failed recreates to 1090, 5 s, the
    # recreate 1095-1120, 2 s; preemption 2: steps 8-10 redone (1150-1170), 5 s, the recreate
    # 1185-1200, 1 s. The first TPU's creation (1000-1004) is the run's start, not a preemption's.
    assert loss["seconds"] == 3 + 12 + 5 + 25 + 2 + 20 + 5 + 15 + 1
    # billed within those: 1075-1080, 1110-1122, 1150-1170, 1195-1201, at $0.001 a second
    assert loss["usd"] == pytest.approx(0.001 * (5 + 12 + 20 + 6))
    assert goodput.breakdown(RECORD, EVENTS, now=5000.0, exits=EXITS, billed=None)["preemption_loss"]["usd"] is None


def test_a_runs_own_records_date_the_tpus_it_ran_on():
    created = {1: 1004.0, 2: 1110.0, 3: 1195.0}
    events = [{**e, "tpu_created_at": created[e["attempt"]]} if e["event"] == "attempt_started" else e
              for e in EVENTS]
    spans = goodput.billed_from_run(RECORD, events, usd_per_hour=3.6, now=5000.0)
    # each from its creation until a preemption was seen after it, the last until the run's end
    assert spans == [Billed(1004, 1078, 3.6), Billed(1110, 1180, 3.6), Billed(1195, 1330, 3.6)]
    # recreated names the new TPU too, and the record's attempt the latest: the same spans
    alt = [e for e in EVENTS if e["event"] != "attempt_started"] + \
        [{"time": 1119, "event": "recreated", "tpu_created_at": 1110.0}]
    assert goodput.billed_from_run({**RECORD, "attempt": {"n": 3, "tpu_created_at": 1195.0}}, alt,
                                   usd_per_hour=None, now=5000.0) == [Billed(1110, 1180, None),
                                                                      Billed(1195, 1330, None)]
    # records of a tpuctl before they named the TPU: no dollars rather than a guess
    assert goodput.billed_from_run(RECORD, EVENTS, usd_per_hour=3.6, now=5000.0) is None


def test_the_summary_is_small_and_reads_back_as_it_was_written():
    record = {**RECORD, "pricing": {"accelerator_type": "v5litepod-8", "zone": "us-west4-a", "tier": "preemptible"}}
    s = goodput.summary(_g(), record=record, final=True)
    assert (s["accelerator_type"], s["zone"], s["capacity"]) == ("v5litepod-8", "us-west4-a", "spot")
    assert (s["wall_s"], s["goodput_s"], s["badput_s"], s["preemptions"]) == (330, 170, 160, 2)
    assert s["recovery_s"] == [62, 30] and s["preemption_s"] == 88 and s["preemption_usd"] == pytest.approx(0.043)
    assert s["seconds"]["wasted_progress"] == 20 and "goodput" not in s["seconds"]
    # the supervisor's record of the TPU wins over the tier; an unknown price keeps no dollars
    assert goodput.summary(_g(), record=record, final=True, capacity="flex-start")["capacity"] == "flex-start"
    unpriced = goodput.summary(_g(), record=record, final=False, priced=False)
    assert unpriced["badput_usd"] is None and unpriced["preemption_usd"] is None and not unpriced["final"]
    back = goodput.usable(json.loads(json.dumps(s)))
    assert back["goodput_pct"] == pytest.approx(100 * 170 / 330, abs=0.01)
    assert {k: back[k] for k in ("wall_s", "recovery_s", "capacity", "preemption_usd")} == \
           {k: s[k] for k in ("wall_s", "recovery_s", "capacity", "preemption_usd")}
    # in the record's listed summary, under Cloud Storage's 8 KiB of custom metadata with room to spare
    listed = record_summary({"run_id": "r", "cluster": "lab", "status": "finished", "goodput": s})
    assert listed["goodput"] == s and listed["cluster"] == "lab"
    assert len(json.dumps(listed)) < SUMMARY_MAX / 2
    huge = {**s, "recovery_s": [1.5] * 2000}
    assert record_summary({"run_id": "r", "goodput": huge})["goodput"]["recovery_s"] == []


@pytest.mark.parametrize("bad", [
    None, [], "x", {"wall_s": 10}, {"wall_s": 10, "goodput_s": 11}, {"wall_s": -1, "goodput_s": 0},
    {"wall_s": float("nan"), "goodput_s": 0}, {"wall_s": True, "goodput_s": 0},
])
def test_a_summary_without_its_numbers_is_not_believed(bad):
    assert goodput.usable(bad) is None


def test_what_a_bucket_writer_put_in_a_summary_is_never_shown_raw():
    g = goodput.usable({"wall_s": 100, "goodput_s": 50, "accelerator_type": "v2-8\x1b]52;c;x\x07",
                        "capacity": "SPOT", "zone": "us-central1-b", "badput_usd": -3, "preemptions": -1,
                        "recovery_s": [10, "x", -2, float("inf"), 20], "seconds": {"evil\x1b": 3, "disruption": 4}})
    assert g["accelerator_type"] is None and g["capacity"] is None and g["zone"] == "us-central1-b"
    assert g["badput_usd"] is None and g["preemptions"] is None and g["badput_s"] == 50
    assert g["recovery_s"] == [10, 20] and g["seconds"] == {"disruption": 4}


def _run(run_id: str, *, created: float, ended: float | None, type_: str = "v2-8", capacity: str = "spot",
         wall: float = 1000, good: float = 800, usd: float | None = 1.0, lost: float = 0.25,
         recoveries: tuple[float, ...] = (), cluster: str = "lab", status: str = "finished") -> dict:
    g = {"as_of": ended or created + wall, "final": ended is not None, "accelerator_type": type_, "capacity": capacity,
         "wall_s": wall, "goodput_s": good, "badput_s": wall - good, "badput_usd": usd, "total_usd": None if usd is None
         else usd * 5, "preemptions": len(recoveries), "preemption_s": 100 if recoveries else 0,
         "preemption_usd": None if usd is None else lost, "recovery_s": list(recoveries)}
    return {"run_id": run_id, "cluster": cluster, "status": status, "created_at": created, "ended_at": ended,
            "goodput": g}


def test_the_fleet_view_counts_every_run_live_in_the_window_per_type_and_capacity():
    now, since = 100_000.0, 100_000.0 - 7 * 86400
    runs = [
        _run("a", created=since - 500, ended=since + 100, recoveries=(60, 200)),       # ended inside: counted
        _run("b", created=since - 5000, ended=since - 1),                              # ended before: not
        _run("c", created=now - 3000, ended=None, type_="v5litepod-8", capacity="on-demand", status="running",
             wall=2000, good=1900, usd=2.0, lost=0.0),
        _run("d", created=now - 900, ended=now - 100, type_="v5litepod-8", capacity="flex-start", usd=None,
             recoveries=(120,)),
        _run("e", created=now + 10, ended=None),                                       # not yet: not
        {"run_id": "f", "cluster": "lab", "status": "running", "created_at": now - 60, "ended_at": None},
        {"run_id": "g", "cluster": "lab", "status": "finished", "created_at": now - 60, "ended_at": now - 5,
         "goodput": {"wall_s": "x"}},
        _run("a", created=since - 500, ended=since + 100),                             # the same run twice
    ]
    view = goodput.fleet(runs, since=since, now=now)
    assert [r["run_id"] for r in view["runs"]] == ["a", "c", "d"]
    assert [r["run_id"] for r in view["without_summary"]] == ["f", "g"]
    t = view["total"]
    assert (t["runs"], t["wall_s"], t["goodput_s"], t["preemptions"]) == (3, 4000, 3500, 3)
    assert t["goodput_pct"] == 87.5
    # dollars of the runs whose price is known (a and c), and how many those are
    assert (t["badput_usd"], t["preemption_usd"], t["priced_runs"]) == (3.0, 0.25, 2)
    assert t["recovery_median_s"] == 120 and t["recoveries"] == 3
    by_type = view["by_accelerator_type"]
    assert set(by_type) == {"v2-8", "v5litepod-8"} and by_type["v5litepod-8"]["runs"] == 2
    assert by_type["v2-8"]["recovery_median_s"] == 130 and by_type["v5litepod-8"]["goodput_pct"] == 90.0
    by_cap = view["by_capacity"]
    assert set(by_cap) == {"spot", "on-demand", "flex-start"}
    assert by_cap["flex-start"]["badput_usd"] is None and by_cap["on-demand"]["preemptions"] == 0
    assert goodput.fleet([], since=since, now=now)["total"]["goodput_pct"] is None


def _facts(run_id: str, **kw) -> history.RunFacts:
    base = {"workload": "w", "accelerator_type": "v5litepod-8", "zone": "us-west4-a", "interruptible": True,
            "steps": 1000, "seconds": 500.0, "examples_per_step": 32, "hosts": 1, "preemptions": 0,
            "held_s": 3600.0, "seconds_lost": 0.0, "provider": "gcp"}
    return history.RunFacts(run_id=run_id, **{**base, **kw})


def test_the_estimates_recovery_is_the_median_of_past_preemptions_on_the_provider_and_type():
    runs = [_facts("a", preemptions=3, seconds_lost=900, recoveries=(100, 192, 400)),
            _facts("b", preemptions=1, seconds_lost=50, recoveries=(150,), zone="us-east5-b"),   # any zone
            _facts("c", preemptions=2, seconds_lost=1000),          # an older record: its mean, twice
            _facts("d", preemptions=1, recoveries=(9,), provider="local"),
            _facts("e", preemptions=1, recoveries=(9,), accelerator_type="v2-8")]
    mid, basis, count = history.median_recovery(runs, provider="gcp", accelerator_type="v5litepod-8")
    assert (mid, count) == (296, 6)       # 100, 150, 192, 400, 500, 500: the middle two's mean
    assert basis == "measured over 6 preemption(s) of past v5litepod-8 runs on gcp (their median)"
    runs[2] = _facts("c", preemptions=1, seconds_lost=500)
    mid, basis, count = history.median_recovery(runs, provider="gcp", accelerator_type="v5litepod-8")
    assert (mid, count) == (192, 5)
    i = history.interruptions(runs, provider="gcp", zone="us-west4-a", accelerator_type="v5litepod-8",
                              interruptible=True, spot=True)
    assert i.recovery_s == 192 and i.recoveries_measured == 5
    assert i.recovery_line() == "recovery 3m12s, measured over 5 preemption(s) of past v5litepod-8 runs on gcp " \
                                "(their median)"
    none = history.interruptions(runs, provider="gcp", zone="us-west4-a", accelerator_type="v6e-8",
                                 interruptible=True, spot=True)
    assert none.recovery_s == performance.RECOVERY_S.value and none.recoveries_measured == 0
    assert none.recovery_line() == f"recovery 10m, {performance.RECOVERY_S.flag()}"
    assert none.recovery_line().startswith("recovery 10m, assumed: ")
    # a record's summary gives its recoveries to the facts
    rec = {"run_id": "r", "provider": "gcp", "preemptions": 2,
           "pricing": {"accelerator_type": "v5litepod-8", "zone": "z", "tier": "spot"},
           "goodput": {"recovery_s": [61.5, "x", 30, -1]}}
    assert history.facts(rec).recoveries == (61.5, 30.0)


def test_an_interruptible_estimate_says_its_recovery_and_its_basis():
    from provision.catalog import prices
    from provision.catalog.accelerators import parse
    from provision.runs import estimate as est
    from provision.runs.flops import given

    acc = parse("v5litepod-8")
    runs = [_facts("a", preemptions=3, recoveries=(100, 192, 400))]
    measured = "recovery 3m12s, measured over 3 preemption(s) of past v5litepod-8 runs on gcp (their median)"
    for interruptible, line in ((True, measured), (False, None)):
        c = est.Candidate(accelerator=acc, zone="us-west4-a", interruptible=interruptible, spot=interruptible,
                          price=prices.BUNDLED.tpu_price(acc, "us-west4-a", prices.tier_of(interruptible)),
                          interruptions=history.interruptions(runs, provider="gcp", zone="us-west4-a",
                                                              accelerator_type=acc.name, interruptible=interruptible,
                                                              spot=interruptible),
                          measured=None)
        e = est.estimate(c, given(1e15), steps=100_000, batch=32, checkpoint_steps=1000)
        d = e.to_dict()
        if line:
            assert line in e.basis and (d["recovery_s"], d["recoveries_measured"]) == (192, 3)
            assert d["recovery_basis"].startswith("measured over 3 ")
        else:
            assert not [b for b in e.basis if b.startswith("recovery ")] and d["recovery_s"] is None
