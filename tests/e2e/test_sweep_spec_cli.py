"""A sweep spec's mistakes through the installed ``tpuctl``: every problem in one error, the most
fundamental first, exit code 2, nothing created; and numbers written as people write them.

Needs no TensorFlow: the job spec's BERT directory is a config and a vocabulary (what the job
spec loader checks before anything runs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import REPO, run_tpuctl_process

JOB = REPO / "templates" / "bert-finetune-tiny.yaml"


@pytest.fixture
def bert(tmp_path) -> Path:
    d = tmp_path / "bert"
    d.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie"]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (d / "bert_config.json").write_text(json.dumps({
        "vocab_size": len(vocab), "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2}))
    for name in ("train.tsv", "dev.tsv"):
        (d / name).write_text("good movie\tpos\nbad movie\tneg\n")
    return d


def sweep_spec(tmp_path: Path, bert: Path, body: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"job: {JOB}\n"
                    f"set: {{bert_dir: {bert}, train_file: {bert}/train.tsv, dev_file: {bert}/dev.tsv}}\n" + body)
    return path


def nothing_created() -> None:
    home = Path(os.environ["TPUCTL_HOME"])
    assert not (home / "sweeps").exists() and not (home / "local" / "buckets").exists()


def test_a_misspelt_metric_and_no_goal_are_both_named_in_one_error(tmp_path, bert):
    spec = sweep_spec(tmp_path, bert, "metric: eval_acuracy\nparameters:\n  learning_rate: {values: [1.0e-3]}\n")
    r = run_tpuctl_process("sweep", str(spec), "--provider", "local")
    assert r.code == 2, r
    assert r.err.strip().splitlines() == [
        f"tpuctl: error: sweep spec {spec} has no goal; add 'goal: maximize' (maximize or minimize)",
        "  also: metric 'eval_acuracy' is never reported by this job; use one of eval_accuracy, eval_loss",
    ]
    nothing_created()


def test_problems_come_most_fundamental_first_and_all_in_the_json_error(tmp_path, bert):
    spec = sweep_spec(tmp_path, bert, "metric: eval_accuracy\nmethod: tpe\nparallelism: 2\nparameters:\n"
                                      "  learning_rate: {values: [-1.0]}\n  warmup_proportion: {min: 0.2, max: 0.1}\n")
    r = run_tpuctl_process("sweep", str(spec), "--provider", "local", "--json")
    assert r.code == 2, r
    doc = r.json()
    assert [p.split(";")[0] for p in doc["problems"]] == [
        f"unknown key 'parallelism' in sweep spec {spec}",
        "method tpe needs max_trials",
        "parameter warmup_proportion has an empty range (min 0.2 is not below max 0.1)",
        "parameter learning_rate value -1.0: learning_rate is -1.0",
    ]
    assert doc["error"] == doc["problems"][0] and doc["exit_code"] == 2
    assert r.err.splitlines()[0] == f"tpuctl: error: {doc['error']}"
    assert [line.removeprefix("  also: ") for line in r.err.splitlines()[1:]] == doc["problems"][1:]
    nothing_created()


def test_numbers_in_exponent_form_are_numbers(tmp_path, bert):
    """YAML 1.1 reads 1e-4 as a string: the range was refused as "not numbers" while values of the
    same form were taken as strings."""
    spec = sweep_spec(tmp_path, bert, "metric: eval_accuracy\nmax_trials: 4\nparameters:\n"
                                      "  learning_rate: {min: 1e-4, max: 1e-2, log: true}\n"
                                      "  weight_decay_rate: {values: [1e-3, 1E-2]}\n")
    r = run_tpuctl_process("sweep", str(spec), "--provider", "local", "--dry-run", "--json")
    assert r.code == 0, r
    params = r.json()["spec"]["parameters"]
    assert params["learning_rate"] == {"min": 1e-4, "max": 1e-2, "log": True}
    assert params["weight_decay_rate"] == {"values": [1e-3, 1e-2]}
    nothing_created()


def test_a_dry_run_says_the_total_against_the_budget_and_whether_it_fits(tmp_path, bert):
    """A dry run is where a user checks the budget, so it says the total against --budget-usd, not
    one TPU's $/hour alone."""
    spec = sweep_spec(tmp_path, bert, "metric: eval_accuracy\nparameters:\n  learning_rate: {min: 1e-4, max: 1e-2}\n")
    r = run_tpuctl_process("sweep", str(spec), "--provider", "local", "--dry-run", "--max-trials", "8",
                           "--max-concurrent", "2", "--budget-usd", "20")
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == (
        "cost: 8 trial(s), 2 at a time: $9.00/hour for the pool; $36.00 if each trial takes an hour; "
        "--budget-usd 20 fits if trials average under 33m20s each (past it, no trial starts that would pass "
        "the budget)"), r.out
    r = run_tpuctl_process("sweep", str(spec), "--provider", "local", "--dry-run", "--max-trials", "8",
                           "--budget-usd", "0.5", "--json")
    assert r.code == 0, r.err
    budget = r.json()["budget"]
    assert budget["fits"] is False and budget["least_usd"] == 0.6 and budget["usd_if_each_trial_takes_an_hour"] == 36.0
