"""Cost accounting from a ledger of TPU lifetimes and run event logs (pure, no I/O)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provision.billing import costs
from provision.cluster import ledger

H = 3600.0
T0 = 1_700_000_000.0
PRICE = 1.35   # v2-8 preemptible, $/hour


def at(hours: float) -> float:
    return T0 + hours * H


def ev(kind: str, hours: float, **kw):
    base = {"id": f"{kind}-{hours}-{kw.get('node', 'lab')}", "t": at(hours), "event": kind, "cluster": "lab",
            "zone": "us-central1-b", "node": "lab", "accelerator_type": "v2-8", "interruptible": True}
    base.update(kw)
    return base


def run_record(**kw):
    rec = {"run_id": "lab-r1", "cluster": "lab", "created_at": at(0.5), "ended_at": at(4.0), "status": "finished",
           "seconds_by_state": {"training": 2.9 * H, "waiting": 0.3 * H, "starting": 0.1 * H}}
    rec.update(kw)
    return rec


RUN_EVENTS = [{"time": at(0.5), "event": "created"}, {"time": at(0.6), "event": "attempt_started"},
              {"time": at(2.0), "event": "preempted"}, {"time": at(2.25), "event": "recreated"},
              {"time": at(2.3), "event": "attempt_started"}, {"time": at(2.5), "event": "resumed"},
              {"time": at(4.0), "event": "finished"}]

# up at 0h; preempted at 2.0h, deleted by the supervisor's recreate at 2.1h, recreated at 2.2h; the run
# ends at 4.0h; the reaper deletes the idle TPU at 4.5h.
LEDGER = [ev("tpu_created", 0.0, created_at=at(0.0), by="up"),
          ev("tpu_preempted", 2.0, created_at=at(0.0)),
          ev("tpu_deleted", 2.1, created_at=at(0.0), by="recreate", state="PREEMPTED"),
          ev("tpu_created", 2.2, created_at=at(2.2), by="up"),
          ev("tpu_deleted", 4.5, created_at=at(2.2), by="reaper", idle_since=at(4.0), state="READY",
             reason="run lab-r1 finished for 30m")]


def test_lifetimes_from_a_ledger():
    lives = costs.lifetimes(LEDGER, [], now=at(6))
    assert [(lt.created_at, lt.deleted_at, lt.deleted_by) for lt in lives] == [
        (at(0), at(2.1), "recreate"), (at(2.2), at(4.5), "reaper")]
    assert lives[0].preempted_at == at(2.0) and lives[0].billed_until(at(6)) == at(2.0)
    assert lives[1].billed_until(at(6)) == at(4.5) and lives[1].hourly == PRICE


def test_hours_by_state_and_their_cost():
    lives = costs.lifetimes(LEDGER, [], now=at(6))
    span = costs.run_span(run_record(), RUN_EVENTS)
    assert span.first_attempt_at == at(0.6) and span.waits == [(at(2.0), at(2.5))]
    a = costs.account(lives, [span], now=at(6))
    assert a.hours == pytest.approx({"idle": 1.0, "starting": 0.1, "training": 2.9, "waiting": 0.3, "making_data": 0.0})
    assert a.billed_hours == pytest.approx(4.3)
    assert a.total_usd == pytest.approx(4.3 * PRICE)
    assert a.cost["training"] == pytest.approx(2.9 * PRICE)
    assert a.cost_on_demand["training"] == pytest.approx(2.9 * 4.50)
    assert a.cost_preemptible["idle"] == pytest.approx(1.0 * PRICE)
    # the preemption's 30 minutes of recovery: 12 of them with no TPU billing at all
    assert a.waiting_unbilled_hours == pytest.approx(0.2)


def test_without_a_preemption_record_the_supervisors_event_dates_it():
    no_mark = [e for e in LEDGER if e["event"] != "tpu_preempted"]
    lives = costs.lifetimes(no_mark, [], now=at(6))
    assert lives[0].billed_until(at(6)) == at(2.1)      # deletion: all the ledger knows
    costs.refine_preemptions(lives, [costs.run_span(run_record(), RUN_EVENTS)])
    assert lives[0].billed_until(at(6)) == at(2.0)      # the supervisor saw it preempted at 2.0h
    assert lives[1].preempted_at is None                 # a TPU deleted while READY is untouched


def test_a_run_window_only():
    lives = costs.lifetimes(LEDGER, [], now=at(6))
    span = costs.run_span(run_record(), RUN_EVENTS)
    a = costs.account(lives, [span], now=at(6), start=span.created_at, end=span.end(at(6)))
    assert a.hours == pytest.approx({"idle": 0.0, "starting": 0.1, "training": 2.9, "waiting": 0.3, "making_data": 0.0})


def test_a_resume_noticed_late_is_still_training_from_its_first_new_step():
    """A supervisor that noticed the resume only when the run had trained to its end (a short run
    between two polls): the first new step came 0.1 h after the preemption (`resumed`'s
    seconds_lost), the event itself at 3.99 h, just before `finished`. Counting the waiting up to
    the event left the whole second attempt out of training."""
    events = [e for e in RUN_EVENTS if e["event"] != "resumed"]
    events.insert(-1, {"time": at(3.99), "event": "resumed", "seconds_lost": 0.1 * H})
    lives = costs.lifetimes(LEDGER, [], now=at(6))
    span = costs.run_span(run_record(), events)
    assert span.waits == [(at(2.0), at(2.1))]
    a = costs.account(lives, [span], now=at(6), start=span.created_at, end=span.end(at(6)))
    # 0.6..2.0 h, and 2.2 (the new TPU) to 4.0 h
    assert a.hours["training"] == pytest.approx(1.4 + 1.8) and a.hours["waiting"] == pytest.approx(0.0)
    # the TPU was gone from 2.0 to 2.2 h: the 0.1 h of waiting were all unbilled
    assert a.waiting_unbilled_hours == pytest.approx(0.1)


def test_data_made_by_the_job_on_the_tpu_host_is_never_training_time():
    """corpus_files: the job made its data from 0.6h to 1.2h (progress.json's data_creation, kept
    across restarts) and again after the preemption, still running at the end: billed, not training."""
    lives = costs.lifetimes(LEDGER, [], now=at(6))
    rec = run_record(last_progress={"data_creation": [[at(0.6), at(1.2)], [at(2.3), None]]})
    rec["ended_at"] = None
    span = costs.run_span(rec, RUN_EVENTS[:-1])
    a = costs.account(lives, [span], now=at(3.0), start=span.created_at, end=at(3.0))
    # 0.5..0.6 starting; 0.6..1.2 data; 1.2..2.0 training; 2.0..2.5 waiting (billed 2.2..2.5, but
    # the second data span starts at 2.3 inside it: waiting wins); 2.5..3.0 data again
    assert a.hours == pytest.approx({"starting": 0.1, "making_data": 0.6 + 0.5, "training": 0.8,
                                     "waiting": 0.3, "idle": 0.0})
    assert costs.run_span(run_record(last_progress={"data_creation": [["x", 1], [1.0]]}), []).data_spans == []


def test_savings_counterfactual():
    lives = costs.lifetimes(LEDGER, [], now=at(6))
    [s] = costs.savings(lives, LEDGER, now=at(6))
    # nobody has touched the cluster since: the TPU would still be billing now, and still saves
    assert s.ongoing and s.until == at(6) and s.usd == pytest.approx(1.5 * PRICE) and s.hourly == PRICE
    assert s.to_dict()["billed_idle_seconds"] == pytest.approx(0.5 * H)
    # the next up (a new TPU) at 5h ends the counterfactual
    later = LEDGER + [ev("tpu_created", 5.0, created_at=at(5.0), by="up")]
    [s] = costs.savings(costs.lifetimes(later, [], now=at(6)), later, now=at(6))
    assert not s.ongoing and s.usd == pytest.approx(0.5 * PRICE)
    # so does a down of the cluster at 5.5h
    downed = LEDGER + [{"id": "d", "t": at(5.5), "event": "cluster_down", "cluster": "lab"}]
    [s] = costs.savings(costs.lifetimes(downed, [], now=at(6)), downed, now=at(6))
    assert s.usd == pytest.approx(1.0 * PRICE)


def test_a_reaped_preempted_node_saves_nothing_but_quota():
    ledger = [ev("tpu_created", 0.0, created_at=at(0.0)), ev("tpu_preempted", 1.0, created_at=at(0.0)),
              ev("tpu_deleted", 1.2, created_at=at(0.0), by="reaper", state="PREEMPTED")]
    lives = costs.lifetimes(ledger, [], now=at(3))
    assert lives[0].billed_until(at(3)) == at(1.0)
    [s] = costs.savings(lives, ledger, now=at(3))
    assert s.usd == 0.0 and s.hourly == 0.0
    a = costs.account(lives, [], now=at(3))
    assert a.hours["idle"] == pytest.approx(1.0)


def test_local_and_bucket_copies_merge_and_down_is_not_a_saving():
    twice = ledger.merge(LEDGER, list(reversed(LEDGER)))
    assert len(twice) == len(LEDGER)
    events = [ev("tpu_created", 0.0, created_at=at(0.0)), ev("tpu_deleted", 1.0, created_at=at(0.0), by="down")]
    lives = costs.lifetimes(events, [], now=at(2))
    assert costs.savings(lives, events, now=at(2)) == []
    assert costs.account(lives, [], now=at(2)).hours["idle"] == pytest.approx(1.0)


def test_what_the_cloud_lists_completes_the_ledger():
    # a TPU made before the ledger existed (or by another machine): counted from its creation
    live = [{"cluster": "lab", "node": "lab", "zone": "us-central1-b", "accelerator_type": "v3-8",
             "interruptible": False, "created_at": at(1.0), "state": "READY"}]
    lives = costs.lifetimes([], live, now=at(3))
    assert len(lives) == 1 and lives[0].deleted_at is None and lives[0].hourly == 8.0
    assert costs.account(lives, [], now=at(3)).total_usd == pytest.approx(16.0)
    # a ledger TPU the cloud no longer lists was deleted outside tpuctl
    open_ledger = [ev("tpu_created", 0.0, created_at=at(0.0))]
    gone = costs.lifetimes(open_ledger, [], now=at(3))
    assert gone[0].deleted_at == at(3) and "outside tpuctl" in gone[0].open_note
    # ... unless the cloud could not be listed: then it is still open
    unknown = costs.lifetimes(open_ledger, None, now=at(3))
    assert unknown[0].deleted_at is None and unknown[0].open_note is None
    # the same incarnation in ledger and listing is counted once
    same = costs.lifetimes(open_ledger, [{**live[0], "created_at": at(0.0), "accelerator_type": "v2-8"}], now=at(3))
    assert len(same) == 1


def test_price_rows_carry_both_prices_region_source_and_date():
    [row] = costs.price_rows(["v2-8", "v2-8"])
    assert row["on_demand_usd_per_hour"] == 4.5 and row["preemptible_usd_per_hour"] == 1.35
    assert row["recorded"] == "2026-11-24" and "skypilot-catalog" in row["source"]
    assert row["region"] == "us-central1" and "nearest known region" in row["on_demand"]["note"]
    # skypilot-catalog v8 gcp/vms.csv: tpu-v2-8 europe-west4-a Price 4.95, SpotPrice 1.26225
    [eu] = costs.price_rows([("v2-8", "europe-west4-a")])
    assert (eu["region"], eu["on_demand_usd_per_hour"], eu["preemptible_usd_per_hour"]) == ("europe-west4", 4.95, 1.2623)
    assert eu["spot"]["tier"] == "spot/preemptible" and eu["on_demand"]["note"] is None


@st.composite
def worlds(draw):
    lives, t = [], 0.0
    for i in range(draw(st.integers(0, 4))):
        t += draw(st.floats(0, 3))
        length = draw(st.floats(0.01, 5))
        preempt = draw(st.one_of(st.none(), st.floats(0, length)))
        lives.append(costs.Lifetime(cluster="c", node="c", zone="z", accelerator_type="v2-8",
                                    interruptible=draw(st.booleans()), created_at=at(t), deleted_at=at(t + length),
                                    preempted_at=None if preempt is None else at(t + preempt)))
        t += length
    runs = []
    for i in range(draw(st.integers(0, 3))):
        start = draw(st.floats(0, 15))
        end = draw(st.one_of(st.none(), st.floats(start, start + 6)))
        waits = []
        if draw(st.booleans()):
            a = draw(st.floats(start, start + 3))
            waits.append((at(a), draw(st.one_of(st.none(), st.just(at(a + 0.5))))))
        runs.append(costs.RunSpan(run_id=f"r{i}", cluster="c", created_at=at(start),
                                  ended_at=None if end is None else at(end),
                                  first_attempt_at=at(start + draw(st.floats(0, 1))), waits=waits))
    return lives, runs


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_every_billed_hour_is_in_exactly_one_state(world):
    lives, runs = world
    now = at(40)
    a = costs.account(lives, runs, now=now)
    billed = sum(lt.billed_until(now) - lt.created_at for lt in lives) / H
    assert a.billed_hours == pytest.approx(billed, abs=1e-6)
    assert all(v >= 0 for v in a.hours.values()) and a.waiting_unbilled_hours >= -1e-9
    assert a.total_usd == pytest.approx(sum(a.cost.values()))
    assert sum(a.cost_preemptible.values()) <= sum(a.cost_on_demand.values()) + 1e-9
    if not runs:
        assert a.hours["idle"] == pytest.approx(billed, abs=1e-6)
