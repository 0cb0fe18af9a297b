"""The estimate's arithmetic (provision.runs.estimate, .flops, .history; provision.catalog.performance), on numbers.

The seed's table is the acceptance case: BERT-Base, sequence length 128, 500k steps on a
preemptible TPU v2-8. Three published measurements of BERT on TPUs put model FLOPs utilisation
at 0.31 under the FLOPs model every estimate uses; at batch 256 that is about 2.3 days, at batch
128 (the same number of sequences as the seed's own source) about 1.1 days and the seed's $38.9.
"""

from __future__ import annotations

import math

import pytest

from provision.catalog import accelerators, performance, prices
from provision.runs import estimate as est
from provision.runs import flops, history

BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
        "initializer_range": 0.02}
LARGE = {**BASE, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096}


def _candidate(name: str, *, interruptible: bool, spot: bool = False, zone: str = "us-central1-b",
               measured: est.Measured | None = None, input_per_host: float | None = None,
               runs: list[history.RunFacts] | None = None) -> est.Candidate:
    acc = accelerators.parse(name)
    return est.Candidate(accelerator=acc, zone=zone, interruptible=interruptible, spot=spot,
                         price=prices.BUNDLED.tpu_price(acc, zone, prices.tier_of(interruptible)),
                         interruptions=history.interruptions(runs or [], provider="gcp", zone=zone,
                                                             accelerator_type=acc.name, interruptible=interruptible,
                                                             spot=spot),
                         measured=measured, input_per_host=input_per_host)


def _per_seq(config: dict, seq: int) -> float:
    return float(flops.bert_step(config, seq_length=seq, batch=1).flops or 0)


def test_bert_base_costs_85_9_gflop_per_sequence_at_128_tokens():
    step = flops.bert_step(BASE, seq_length=128, batch=256)
    assert step.flops == pytest.approx(256 * 85.894e9, rel=1e-4)
    assert "6 x 109,482,240 parameters x 128 tokens" in step.basis and "x batch 256" in step.basis
    # the H100 reference of docs/estimate.md: 3,799 sequences/s at MFU 0.33 of 989 TFLOP/s
    assert 3799 * _per_seq(BASE, 128) / 989e12 == pytest.approx(0.33, abs=0.005)


def test_the_utilisation_figures_are_what_their_sources_measured():
    # v2: 1M steps of batch 128 at seq 128, BERT-Base, 54 hours on a v2-8 (4 chips x 45 TFLOP/s)
    v2 = 128 * 1e6 * _per_seq(BASE, 128) / (54 * 3600 * 4 * 45e12)
    # v3: BERT-Large, 1M steps of batch 512, 90 % at 128 and 10 % at 512, 81.4 h on 16 v3 chips
    v3 = 512 * (9e5 * _per_seq(LARGE, 128) + 1e5 * _per_seq(LARGE, 512)) / (81.4 * 3600 * 16 * 123e12)
    # the same paper's 76.19 minutes on 1024 chips (7,037 steps of 65,536 at 128, 1,562 of 32,768 at 512)
    lamb = (65536 * 7037 * _per_seq(LARGE, 128) + 32768 * 1562 * _per_seq(LARGE, 512)) / (76.19 * 60 * 1024 * 123e12)
    assert performance.UTILISATION["v2"].value == pytest.approx(v2, abs=0.001)
    assert performance.UTILISATION["v3"].value == pytest.approx(v3, abs=0.001)
    assert lamb == pytest.approx(v3, abs=0.002)
    assert performance.UTILISATION["v2"].measured_here and performance.UTILISATION["v3"].measured_here
    for gen in ("v4", "v5litepod", "v5p", "v6e"):        # carried over, and said so
        fig = performance.UTILISATION[gen]
        assert not fig.measured_here and fig.flag().startswith("assumed:")


@pytest.mark.parametrize(("batch", "days", "usd"), [(256, (2.2, 2.4), (70, 78)), (128, (1.1, 1.2), (35, 40))])
def test_the_seeds_case_on_a_preemptible_v2_8(batch, days, usd):
    step = flops.bert_step(BASE, seq_length=128, batch=batch)
    e = est.estimate(_candidate("v2-8", interruptible=True), step, steps=500_000, batch=batch, checkpoint_steps=1000)
    assert days[0] < e.total_s / 86400 < days[1], e.total_s / 86400
    assert usd[0] < e.total_usd < usd[1], e.total_usd
    assert e.usd_per_hour == 1.35 and e.speed_source == "published" and e.tier == "preemptible"
    assert e.interruptions == pytest.approx(e.total_s / 3600 / 24)     # the 24-hour limit of preemptible TPUs
    assert any("utilisation 0.314" in line and "Antyukhov" in line for line in e.basis)


def test_on_demand_has_no_interruptions_and_spot_pays_for_recovery_and_lost_steps():
    step = flops.bert_step(BASE, seq_length=128, batch=256)
    od = est.estimate(_candidate("v3-8", interruptible=False), step, steps=100_000, batch=256, checkpoint_steps=1000)
    spot = est.estimate(_candidate("v3-8", interruptible=True, spot=True), step, steps=100_000, batch=256,
                        checkpoint_steps=1000)
    assert od.interruptions == 0 and od.total_s == od.compute_s
    rate = od.steps_per_sec
    each = performance.RECOVERY_S.value + 500 / rate          # recovery + half a checkpoint interval
    assert spot.total_s == pytest.approx(spot.compute_s / (1 - each / 24 / 3600))
    assert spot.total_usd < od.total_usd and spot.total_s > od.total_s


def test_a_measured_rate_wins_over_the_published_one():
    m = est.Measured(steps_per_sec=2.0, steps=4000, seconds=2000.0, runs=("lab-1", "lab-2"))
    e = est.estimate(_candidate("v2-8", interruptible=False, measured=m), flops.unknown("keras"), steps=7200,
                     batch=32, checkpoint_steps=100)
    assert e.speed_source == "measured" and e.compute_s == 3600 and e.total_usd == pytest.approx(4.5)
    assert e.basis[0].startswith("measured: 2 steps/s over 4000 steps in 2 past run(s)")
    # a start's warm-up, measured by the same runs, is added once (a recovery's is in its recovery time)
    warm = est.Measured(steps_per_sec=2.0, steps=4000, seconds=2000.0, runs=("lab-1",), warmup_s=36.0)
    e = est.estimate(_candidate("v2-8", interruptible=False, measured=warm), flops.unknown("keras"), steps=7200,
                     batch=32, checkpoint_steps=100)
    assert e.compute_s == 3636 and "+ the warm-up = 1.01 h" in e.basis[-2]


def test_a_job_without_flops_or_history_cannot_be_estimated():
    with pytest.raises(est.Unknowable):
        est.estimate(_candidate("v2-8", interruptible=False), flops.unknown("keras"), steps=10, batch=8,
                     checkpoint_steps=5)
    step = flops.given(1e12)
    e = est.estimate(_candidate("v2-8", interruptible=False), step, steps=100_000, batch=8, checkpoint_steps=5)
    assert e.steps_per_sec == pytest.approx(180e12 * 0.314 / 1e12)


def test_a_modelled_estimate_under_a_minute_or_any_under_a_second_is_not_made():
    """A job this small is ruled by what the FLOPs model leaves out, so it gets no estimate rather
    than a wrong one: the tiny BERT's 300 steps on a v2-8 came out "0s and $0.00"."""
    tiny = flops.bert_step({**BASE, "vocab_size": 150, "hidden_size": 32, "num_hidden_layers": 2,
                            "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
                           seq_length=32, batch=16)
    with pytest.raises(est.Baseless) as why:
        est.estimate(_candidate("v2-8", interruptible=True), tiny, steps=300, batch=16, checkpoint_steps=50)
    assert str(why.value).startswith("the published speed of a v2-8 (") and \
        "puts 300 steps at" in str(why.value) and "train it once on the type" in str(why.value)
    fast = est.Measured(steps_per_sec=1000.0, steps=4000, seconds=4.0, runs=("lab-1",))
    with pytest.raises(est.Baseless, match="the measured 1000 steps/s puts 300 steps under a second"):
        est.estimate(_candidate("v2-8", interruptible=False, measured=fast), tiny, steps=300, batch=16,
                     checkpoint_steps=50)
    # a measured rate of the same tiny job is a basis: its seconds are what it took
    slow = est.Measured(steps_per_sec=10.0, steps=400, seconds=40.0, runs=("lab-1",), warmup_s=6.0)
    e = est.estimate(_candidate("v2-8", interruptible=False, measured=slow), tiny, steps=300, batch=16,
                     checkpoint_steps=50)
    assert e.total_s == pytest.approx(36.0)


@pytest.mark.parametrize(("per_hour", "each", "compute", "total", "count"), [
    (0.0, 600, 3600, 3600, 0),
    (1.0, 600, 3600, 4320, 1.2),        # 1/h, 10 min each: 1/(1 - 1/6)
    (6.0, 600, 3600, math.inf, math.inf),   # interrupted as fast as it recovers
    (2.0, 0, 7200, 7200, 4),
])
def test_interruptions_stretch_the_run(per_hour, each, compute, total, count):
    t, n = est.duration(compute, per_hour=per_hour, per_interruption_s=each)
    assert t == pytest.approx(total) and n == pytest.approx(count)


def test_cheapest_and_fastest_are_marked():
    step = flops.bert_step(BASE, seq_length=128, batch=256)
    cands = [_candidate("v2-8", interruptible=True), _candidate("v2-8", interruptible=False),
             _candidate("v6e-8", interruptible=False, zone="us-east5-b")]
    ranked = est.rank([est.estimate(c, step, steps=500_000, batch=256, checkpoint_steps=1000) for c in cands])
    assert [(e.cheapest, e.fastest) for e in ranked] == [(False, False), (False, False), (True, True)]
    ranked = est.rank(ranked[:2])
    assert [(e.cheapest, e.fastest) for e in ranked] == [(True, False), (False, True)]


def _facts(run_id: str, **kw) -> history.RunFacts:
    base = {"workload": "w", "accelerator_type": "v2-8", "zone": "us-central1-b", "interruptible": True,
            "steps": 1000, "seconds": 500.0, "examples_per_step": 32, "hosts": 1, "preemptions": 0,
            "held_s": 3600.0, "seconds_lost": 0.0, "warmups": (20.0,), "provider": "gcp"}
    return history.RunFacts(run_id=run_id, **{**base, **kw})


def test_the_ledger_of_past_runs_gives_rates_preemptions_and_recovery():
    runs = [_facts("a", warmups=(10.0, 30.0)), _facts("b", steps=3000, seconds=1000.0, preemptions=2, held_s=36000.0, seconds_lost=300.0),
            _facts("c", workload="other", steps=10, seconds=1.0), _facts("d", accelerator_type="v3-8")]
    m = history.measured(runs, "w", "v2-8")
    assert m is not None and m.steps_per_sec == pytest.approx(4000 / 1500) and m.runs == ("a", "b")
    assert m.warmup_s == pytest.approx(20.0)            # a: 10 and 30 s, b: 20 s
    assert history.measured(runs, "w", "v4-8") is None
    assert history.input_per_host(runs, "w") == pytest.approx(3 * 32)     # d: 1000/500 x 32, b: 3 x 32
    i = history.interruptions(runs, provider="gcp", zone="us-central1-b", accelerator_type="v2-8",
                              interruptible=True, spot=True)
    # every run on the type in the zone counts, whatever its work: a, b, c held it 12 hours
    assert i.per_hour == pytest.approx(2 / 12) and i.recovery_s == pytest.approx(150.0)
    assert i.per_hour_basis.startswith("ledger: 2 preemption(s) in 12.0 held hours of 3 run(s)")
    # a few hours without a preemption say little: the cited default stays
    quiet = history.interruptions([_facts("e")], provider="gcp", zone="us-central1-b", accelerator_type="v2-8",
                                  interruptible=True, spot=False)
    assert quiet.per_hour == performance.PREEMPTIBLE_LIMIT.value and quiet.recovery_s == performance.RECOVERY_S.value
    assert history.interruptions(runs, provider="gcp", zone="us-central1-b", accelerator_type="v2-8",
                                 interruptible=False, spot=False).per_hour == 0


def test_each_providers_preemptions_count_only_for_it_and_minutes_make_no_rate():
    """Practice on the local provider says nothing of Google Cloud's preemption rate, and minutes
    of holding make no rate: the tour's five practice preemptions read as 112.5 an hour and an
    estimate that never finishes."""
    practice = [_facts(f"tour-{i}", provider="local", preemptions=1, held_s=8.0, seconds_lost=15.0)
                for i in range(5)]
    real = [_facts("lab-1", preemptions=1, held_s=36000.0, seconds_lost=420.0)]
    gcp = history.interruptions(practice + real, provider="gcp", zone="us-central1-b", accelerator_type="v2-8",
                                interruptible=True, spot=False)
    assert gcp.per_hour == pytest.approx(0.1) and gcp.recovery_s == pytest.approx(420.0)
    assert gcp.per_hour_basis == "ledger: 1 preemption(s) in 10.0 held hours of 1 run(s) here"
    local = history.interruptions(practice + real, provider="local", zone="us-central1-b", accelerator_type="v2-8",
                                  interruptible=True, spot=False)
    assert local.per_hour == performance.PREEMPTIBLE_LIMIT.value
    assert local.per_hour_basis == (f"{performance.PREEMPTIBLE_LIMIT.flag()}; the ledger's 5 preemption(s) here "
                                    f"came in 1 min held, under the 1 h a rate needs")
    # the records carry their provider
    rec = {"run_id": "r", "provider": "local", "pricing": {"accelerator_type": "v2-8", "zone": "z", "tier": "spot"}}
    assert history.facts(rec).provider == "local"


def test_a_tpu_faster_than_the_input_pipeline_ever_was_is_flagged():
    m = est.Measured(steps_per_sec=10.0, steps=100, seconds=10.0, runs=("a",))
    slow = est.estimate(_candidate("v2-8", interruptible=False, measured=m, input_per_host=320.0),
                        flops.unknown("keras"), steps=100, batch=32, checkpoint_steps=10)
    assert slow.input_note is None                          # 320 examples/s needed, 320 delivered
    fast = est.estimate(_candidate("v2-8", interruptible=False, measured=m, input_per_host=100.0),
                        flops.unknown("keras"), steps=100, batch=32, checkpoint_steps=10)
    assert "data, not the TPU" in (fast.input_note or "") and "320 examples/s per host" in fast.input_note


def test_the_workload_key_ignores_paths_steps_and_seeds():
    spec = {"job": "bert-pretrain", "train_batch_size": 256, "max_seq_length": 128, "model_dir": "gs://a/1",
            "num_train_steps": 10, "seed": 1}
    same = {**spec, "model_dir": "gs://b/2", "num_train_steps": 99, "seed": 7}
    assert flops.workload_key(spec, BASE) == flops.workload_key(same, BASE)
    assert flops.workload_key(spec, BASE) != flops.workload_key({**spec, "train_batch_size": 128}, BASE)
    assert flops.workload_key(spec, BASE) != flops.workload_key(spec, LARGE)
    keras = {"job": "keras", "module": "model.py", "params": {"hidden": 32}, "train_batch_size": 32}
    assert flops.workload_key(keras) == flops.workload_key({**keras, "module": "/home/me/mlp/model.py"})
    assert flops.workload_key(keras) != flops.workload_key({**keras, "params": {"hidden": 64}})


def test_a_program_with_no_batch_of_tpuctls_has_work_but_no_flops():
    """A job: command spec has no train_batch_size (the program's batch is its own): train on GCP
    ended in an internal KeyError; its work is known by steps, with FLOPs only when given."""
    from provision.runs.forecast import work_of

    spec = {"job": "command", "num_train_steps": 100, "save_checkpoints_steps": 10}
    work = work_of(spec, target=None)
    assert (work.batch, work.steps, work.checkpoint_steps) == (0, 100, 10)
    assert work_of(spec, target=None, flops_per_step=2e12).step.flops == 2e12
