"""Same spec, same model on any number of replicas: every loss is a mean over the global batch,
and evaluation batches that do not split over the replicas are padded, not refused."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks.bench_topology import distance, final_weights

from .conftest import finetune_spec, job_env, pretrain_spec, read_progress, run_job
from .test_squad_training import squad_spec

pytestmark = [pytest.mark.tf, pytest.mark.slow]


@pytest.mark.long
def test_four_replicas_train_the_one_replica_model_and_evaluate_an_unsplittable_batch(tmp_path, tiny_dir,
                                                                                     job_here):
    """The tiny pretraining spec on 1 and on 4 replicas: the masked-LM loss divides by the
    global batch's weights, so the weights agree to float noise (far below another seed's
    distance, and below the original per-replica normalisation's); eval_batch_size 6 does not
    divide over 4 replicas and evaluates the same 6 examples, padded with weight-0 rows."""
    steps = 12
    runs = {"one": ({}, ()), "four": ({"TPUCTL_CPU_REPLICAS": "4"}, ()),
            "four-per-replica": ({"TPUCTL_CPU_REPLICAS": "4"}, ("loss_normalization=replica",)),
            "other-seed": ({}, ("seed=7",))}
    progress = {}
    for name, (env, sets) in runs.items():
        (tmp_path / name).mkdir()
        spec = pretrain_spec(tmp_path / name, tiny_dir, num_train_steps=steps, save_checkpoints_steps=steps,
                             steps_per_execution=steps, eval_batch_size=6, max_eval_steps=1,
                             export_bert_dir=False)
        # one replica in this process; logical replicas are set once per process: a job's own
        proc = job_here(spec, *sets) if not env else run_job(spec, *sets, env=job_env(**env))
        assert proc.returncode == 0, proc.stderr[-3000:]
        progress[name] = read_progress(tmp_path / name / "pretrain")
    assert progress["four"]["device"]["count"] == 4

    one = final_weights(tmp_path / "one" / "pretrain")
    same = distance(one, final_weights(tmp_path / "four" / "pretrain"))
    per_replica = distance(one, final_weights(tmp_path / "four-per-replica" / "pretrain"))
    other = distance(one, final_weights(tmp_path / "other-seed" / "pretrain"))
    assert same["max"] < other["max"] / 100 and same["all"] < other["all"] / 100, (same, other)
    assert per_replica["all"] > 100 * same["all"], (per_replica, same)  # the option changes the gradient

    # the same 6 evaluation examples on 1 and on 4 replicas (padded to 8 there)
    for key, value in progress["one"]["metrics"].items():
        if key.startswith(("masked_lm", "next_sentence")):
            assert progress["four"]["metrics"][key] == pytest.approx(value, abs=1e-4), key


@pytest.mark.long
def test_the_tiny_classifier_and_squad_templates_evaluate_on_a_32_core_slice(tmp_path, tiny_dir):
    """templates/bert-finetune-tiny.yaml (eval_batch_size 16) and bert-squad-tiny.yaml
    (predict_batch_size 16) on a slice of 32 cores as the local provider emulates a v2-32 (its
    core count in TPUCTL_SLICE_CORES; 4 replicas here), with the pod's training batch: the eval
    and predict batches are padded to 32, and every dev example and question is counted once."""
    slice_env = job_env(TPUCTL_CPU_REPLICAS="4", TPUCTL_SLICE_CORES="32", TPUCTL_ACCELERATOR_TYPE="v2-32")
    short = {"num_train_steps": 2, "save_checkpoints_steps": 2, "steps_per_execution": 2,
             "train_batch_size": 32}
    (tmp_path / "ft").mkdir()
    proc = run_job(finetune_spec(tmp_path / "ft", tiny_dir, **short), env=slice_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "ft" / "run" / "eval_results.json").read_text())
    dev_examples = sum(1 for line in (tiny_dir / "dev.tsv").read_text().splitlines() if line.strip()) - 1
    assert results["eval_examples"] == dev_examples

    (tmp_path / "sq").mkdir()
    proc = run_job(squad_spec(tmp_path / "sq", tiny_dir, **short), env=slice_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dev = json.loads((tiny_dir / "squad" / "dev-v1.1.json").read_text())
    predictions = json.loads((tmp_path / "sq" / "squad" / "predictions.json").read_text())
    assert len(predictions) == sum(len(p["qas"]) for a in dev["data"] for p in a["paragraphs"])
