"""The pure parts of `tpuctl sweep`: spec checks, budget, pool reuse, the best trial, the reaper's rule."""

from __future__ import annotations

import pytest

from provision.basics.errors import SpecProblems, UsageError
from provision.billing.idle import SweepView, judge
from provision.cloud.base import Arch, TpuNode, TpuState
from provision.sweeps import budget, pool, view
from provision.sweeps import spec as sweepspec
from provision.sweeps.store import TrialRecord

KEYS = {"learning_rate", "warmup_proportion", "train_batch_size", "num_train_steps", "bert_dir", "model_dir", "job"}
REPORTED = ("eval_accuracy", "eval_loss")


def parse(raw, **kw):
    base = {"job": "j.yaml", "metric": "eval_accuracy", "goal": "maximize",
            "parameters": {"learning_rate": {"values": [2e-5, 3e-5, 5e-5]}}}
    return sweepspec.parse({**base, **raw}, job_keys=KEYS, reported=REPORTED, **kw)


def test_the_issue_example_parses():
    s = parse({"method": "tpe", "pruner": "asha", "max_trials": 16, "set": {"bert_dir": "gs://b/bert/base"},
               "parameters": {"learning_rate": {"values": [2e-5, 3e-5, 5e-5]},
                              "warmup_proportion": {"min": 0.0, "max": 0.2},
                              "train_batch_size": {"values": [16, 32]}}})
    assert (s.method, s.pruner, s.max_trials, s.grid_size) == ("tpe", "asha", 16, None)
    assert sweepspec.from_dict(s.to_dict()) == s


def test_a_grid_defaults_to_its_size_and_refuses_a_smaller_max_trials():
    assert parse({}).max_trials == 3 and parse({}).method == "grid"
    with pytest.raises(UsageError, match="grid has 3 points, more than --max-trials 2.*raise --max-trials to 3"):
        parse({}, max_trials=2)
    with pytest.raises(UsageError, match="more than max_trials 2"):
        parse({"max_trials": 2})


@pytest.mark.parametrize("raw, message", [
    ({"parameters": {"learning_rte": {"values": [1]}}}, "parameter 'learning_rte' is not a key of the job spec; did you mean learning_rate"),
    ({"parameters": {"learning_rate": {"min": 0.2, "max": 0.1}}, "method": "tpe", "max_trials": 2}, "empty range"),
    ({"parameters": {"learning_rate": {"min": 0.1, "max": 0.1}}, "method": "tpe", "max_trials": 2}, "empty range"),
    ({"parameters": {"learning_rate": {"values": []}}}, "empty list of values"),
    ({"metric": "eval_f1"}, "metric 'eval_f1' is never reported by this job; use one of eval_accuracy, eval_loss"),
    ({"parameters": {"model_dir": {"values": ["a"]}}}, "parameter model_dir cannot be swept"),
    ({"method": "grid", "parameters": {"learning_rate": {"min": 1e-5, "max": 1e-4}}}, "grid needs a list of values"),
    ({"method": "tpe"}, "needs max_trials"),
    ({"pruner": "median"}, "pruner 'median' is not one of none, asha, hyperband"),
    ({"parameters": {"learning_rate": {"min": 0.0, "max": 1.0, "log": True}}, "method": "random",
      "max_trials": 2}, "log scale but its min is 0.0"),
    ({"parallelism": 2}, "unknown key 'parallelism'"),
    ({"set": {"bert_dri": "x"}}, "set: 'bert_dri' is not a key of the job spec; did you mean bert_dir"),
])
def test_bad_specs_are_one_line_usage_errors(raw, message):
    with pytest.raises(UsageError) as exc:
        parse(raw)
    assert message in exc.value.one_line() and "\n" not in exc.value.one_line()
    assert exc.value.exit_code == 2


def test_budget_counts_spent_running_and_the_next_trial():
    hourly = 3600.0      # $1 a second, for readable numbers
    assert budget.may_start(None, hourly_usd=hourly, ended_seconds=[], running_seconds=[]).start
    first = budget.may_start(61.0, hourly_usd=hourly, ended_seconds=[], running_seconds=[])
    assert first.start and first.next_usd == 60.0            # nothing ended yet: a minute
    # a running trial counts at least the estimate, so a second one at once would pass the budget
    assert not budget.may_start(100.0, hourly_usd=hourly, ended_seconds=[], running_seconds=[5.0]).start
    # after a 20 s trial: 20 spent + 60 estimated
    assert budget.may_start(80.0, hourly_usd=hourly, ended_seconds=[20.0], running_seconds=[]).start
    later = budget.may_start(79.0, hourly_usd=hourly, ended_seconds=[20.0], running_seconds=[])
    assert not later.start and "--budget-usd 79" in later.reason
    # long trials: the estimate is their mean
    assert budget.estimate_s([100.0, 300.0]) == 200.0


def test_the_pool_reuses_a_free_cluster_before_creating_and_never_grows_past_max_concurrent():
    sid = "sweep-20260101-000000-abcd"
    assert pool.choose(sid, [], 2) == pool.Choice(f"{sid}-p0", create=True)
    busy0 = pool.Slot(f"{sid}-p0", True)
    assert pool.choose(sid, [busy0], 2) == pool.Choice(f"{sid}-p1", create=True)
    assert pool.choose(sid, [busy0, pool.Slot(f"{sid}-p1", False)], 2) == pool.Choice(f"{sid}-p1")
    assert pool.choose(sid, [busy0, pool.Slot(f"{sid}-p1", True)], 2).cluster is None
    assert pool.choose(sid, [pool.Slot(f"{sid}-p1", True)], 2) == pool.Choice(f"{sid}-p0", create=True)
    free = [pool.Slot(f"{sid}-p{k}", False) for k in range(3)]
    assert pool.surplus(free, still_to_start=1) == [f"{sid}-p1", f"{sid}-p2"]
    assert pool.surplus([busy0], still_to_start=0) == []
    assert pool.index_of(sid, f"{sid}-p12") == 12 and pool.index_of(sid, "other-p1") is None


def test_the_best_trial_is_a_finished_one_with_the_best_metric():
    ts = [TrialRecord(0, {"lr": 1}, state="finished", metric=0.8), TrialRecord(1, {"lr": 2}, state="pruned", metric=0.99),
          TrialRecord(2, {"lr": 3}, state="finished", metric=0.9), TrialRecord(3, {"lr": 4}, state="running")]
    assert view.best(ts, "maximize").trial == 2
    assert view.best(ts, "minimize").trial == 0
    assert view.best(ts[1:2], "maximize") is None


def test_the_reaper_keeps_a_live_sweeps_pool_and_deletes_a_dead_ones():
    node = TpuNode(name="sweep-x-p0", zone="us-central1-b", accelerator_type="v2-8", arch=Arch.VM, state=TpuState.READY,
                   created_at=0.0, labels={"tpuctl-cluster": "sweep-x-p0", "tpuctl-sweep": "sweep-x"})
    live = judge(node, None, now=10_000.0, idle_for=60, sweep=SweepView("sweep-x", alive=True, state="running"))
    assert not live.delete and "live sweep sweep-x" in live.reason
    dead = judge(node, None, now=100.0, idle_for=3600, sweep=SweepView("sweep-x", alive=False, state="running"))
    assert dead.delete and "controller is gone" in dead.reason


def test_every_problem_is_named_at_once_the_most_fundamental_first():
    """A misspelt metric and no goal: the goal (a missing key) comes first, and the metric (a
    value) is in the same error, not found only after the goal is added."""
    with pytest.raises(SpecProblems) as exc:
        sweepspec.parse({"job": "j.yaml", "metric": "eval_acuracy", "parameters": {"learning_rate": {"values": [1]}}},
                        job_keys=KEYS, reported=REPORTED)
    assert exc.value.one_line().startswith("sweep spec has no goal; add 'goal: maximize'")
    assert exc.value.more == ("metric 'eval_acuracy' is never reported by this job; use one of eval_accuracy, eval_loss",)
    assert exc.value.exit_code == 2


def test_problems_are_ordered_unknown_keys_then_missing_keys_then_values_whatever_the_order_found():
    with pytest.raises(SpecProblems) as exc:
        sweepspec.parse({"job": "j.yaml", "metric": "eval_accuracy", "method": "tpe", "seed": -1,
                         "parameters": {"learning_rate": {"min": 0.2, "max": 0.1}, "learning_rte": {"values": [1]}},
                         "parallelism": 2}, job_keys=KEYS, reported=REPORTED)
    lines = [exc.value.one_line(), *exc.value.more]
    assert [line.split(";")[0] for line in lines] == [
        "unknown key 'parallelism' in sweep spec",                          # unknown keys
        "parameter 'learning_rte' is not a key of the job spec",
        "method tpe needs max_trials",                                      # missing keys
        "parameter learning_rate has an empty range (min 0.2 is not below max 0.1)",   # values
        "seed in sweep spec must be an integer >= 0",
    ]


def test_without_a_metric_its_default_goal_is_not_asked_for_too():
    with pytest.raises(SpecProblems) as exc:
        sweepspec.parse({"job": "j.yaml", "parameters": {"learning_rate": {"values": [1]}}}, job_keys=KEYS,
                        reported=REPORTED)
    assert exc.value.one_line() == ("sweep spec has no metric; add 'metric: eval_accuracy' "
                                    "(eval_accuracy, eval_loss are reported)")
    assert exc.value.more == ()
