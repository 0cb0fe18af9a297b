"""A tiny BERT pretrains (loss falls), exports, and fine-tunes to a stated accuracy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import (
    checkpoint_steps,
    finetune_spec,
    job_env,
    loss_lines,
    pretrain_spec,
    read_progress,
    run_job,
)

pytestmark = [pytest.mark.tf, pytest.mark.slow]

FINETUNE_ACCURACY = 0.95  # dev accuracy the tiny model must reach on the sentiment task


def test_pretraining_loss_falls_and_the_export_loads_back(tmp_path, tiny_dir, job_here):
    spec = pretrain_spec(tmp_path, tiny_dir, eval_every_steps=60)
    proc = job_here(spec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model_dir = tmp_path / "pretrain"
    losses = loss_lines(proc.stderr)
    assert len(losses) == 6  # 120 steps in host loops of 20
    assert losses[-1] < 0.85 * losses[0], losses
    record = read_progress(model_dir)
    assert record["status"] == "finished" and record["step"] == 120
    assert record["checkpoint_step"] == 120 and checkpoint_steps(model_dir) == [60, 120]
    assert record["metrics"]["mlm_accuracy"] > 0.1
    # Evaluation (every 60 steps and at the end) reports what the job declares, on a fixed
    # slice of the data: the model improves on it.
    from jobs.spec import reported_metrics

    evals = record["evals"]
    assert [e["step"] for e in evals] == [60, 120]
    assert all(set(e["metrics"]) == set(reported_metrics("bert-pretrain")) for e in evals)
    assert evals[1]["metrics"]["masked_lm_loss"] < evals[0]["metrics"]["masked_lm_loss"]
    assert record["metrics"]["masked_lm_accuracy"] == evals[1]["metrics"]["masked_lm_accuracy"]
    assert (model_dir / "pretraining_data" / "DONE").exists()
    # when the job made its data (tpuctl cost counts it apart from training): one closed span
    [[made_from, made_to]] = record["data_creation"]
    assert record["started_at"] <= made_from <= made_to <= record["time"]
    # TensorBoard's event files in a directory of their own, apart from the checkpoints
    assert list((model_dir / "tb" / "train").glob("events.out.tfevents.*"))
    assert not list(model_dir.glob("events.out.tfevents.*")) and not (model_dir / "train").exists()
    assert not [p for p in (model_dir / "tb").rglob("*") if p.is_file() and "tfevents" not in p.name]

    # The export is an original-layout BERT directory: TF1 names, heads included; it loads
    # through load_encoder and holds exactly the trained weights of the last checkpoint.
    import tensorflow as tf

    from jobs.bert import load_encoder
    from jobs.bert.weights import object_key

    from . import reference

    export = model_dir / "export"
    exported = tf.train.load_checkpoint(str(export / "bert_model.ckpt"))
    names = exported.get_variable_to_shape_map()
    assert "cls/predictions/output_bias" in names and "cls/seq_relationship/output_weights" in names
    trained = tf.train.load_checkpoint(str(model_dir / "ckpt-120"))
    name = "bert/encoder/layer_1/output/dense/kernel"
    np.testing.assert_array_equal(exported.get_tensor(name), trained.get_tensor(object_key(name)))
    initial = tf.train.load_checkpoint(str(tiny_dir / "bert_model.ckpt"))
    assert not np.allclose(exported.get_tensor(name), initial.get_tensor(name))  # it trained
    encoder = load_encoder(str(export))
    ids = np.array([[2, 40, 41, 42, 3, 0]], np.int32)
    seg, mask = np.zeros_like(ids), (ids > 0).astype(np.int32)
    out = encoder({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})
    arrays = {n: exported.get_tensor(n) for n in names}
    seq_ref, _ = reference.bert(arrays, 2, 2, ids, seg, mask)
    assert np.abs(out["sequence_output"].numpy() - seq_ref).max() < 1e-4


def test_finetuning_reaches_the_stated_accuracy(tmp_path, tiny_dir, job_here):
    spec = finetune_spec(tmp_path, tiny_dir)
    proc = job_here(spec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert results["eval_examples"] == 160  # every dev example counted once (160 = 10 x 16)
    assert results["eval_accuracy"] >= FINETUNE_ACCURACY, results
    losses = loss_lines(proc.stderr)
    assert losses[-1] < 0.5 * losses[0]
    record = read_progress(tmp_path / "run")
    assert record["status"] == "finished"
    assert record["metrics"]["eval_accuracy"] == pytest.approx(results["eval_accuracy"])
    assert (tmp_path / "run" / "labels.txt").read_text() == "neg\npos\n"


@pytest.mark.long
def test_multi_replica_path_and_batch_size_check(tmp_path, tiny_dir):
    """Two logical CPU replicas run the MirroredStrategy path (all-reduce, merge calls); a
    global batch that does not split over them stops before any step with one line."""
    spec = finetune_spec(tmp_path, tiny_dir, num_train_steps=40, save_checkpoints_steps=40,
                         steps_per_execution=20)
    bad = run_job(spec, "train_batch_size=15", env=job_env(TPUCTL_CPU_REPLICAS="2"))
    assert bad.returncode == 2
    errors = [line for line in bad.stderr.splitlines() if line.startswith("tpuctl: error")]
    assert errors == [("tpuctl: error: train_batch_size 15 does not divide over the 2 replicas of "
                       "this CPU (2 logical replicas); use a multiple of 2, e.g. "
                       "--set train_batch_size=16")]
    assert checkpoint_steps(tmp_path / "run") == []
    record = read_progress(tmp_path / "run")
    assert record["status"] == "failed" and record["step"] == 0

    good = run_job(spec, env=job_env(TPUCTL_CPU_REPLICAS="2"))
    assert good.returncode == 0, good.stderr[-3000:]
    record = read_progress(tmp_path / "run")
    assert record["device"]["count"] == 2 and record["step"] == 40
    assert record["examples_per_sec"] > 0


@pytest.mark.long
def test_finetuning_starts_from_our_own_pretraining_checkpoint(tmp_path, tiny_dir, job_here):
    """init_checkpoint may name a runner checkpoint (object-based, original names inside)."""
    pre = job_here(pretrain_spec(tmp_path, tiny_dir, num_train_steps=20, save_checkpoints_steps=20,
                                export_bert_dir=False))
    assert pre.returncode == 0, pre.stderr[-3000:]
    spec = finetune_spec(tmp_path, tiny_dir, num_train_steps=20, save_checkpoints_steps=20,
                         init_checkpoint=str(tmp_path / "pretrain"))
    proc = job_here(spec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"initialized 39 variables from {tmp_path / 'pretrain' / 'ckpt-20'}" in proc.stderr
