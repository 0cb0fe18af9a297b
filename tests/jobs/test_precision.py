"""bfloat16 and XLA: the bf16 heads work eagerly as in a tf.function, a ``precision: bfloat16``
spec trains, and the XLA-compiled step (the GPU path, here on the CPU) trains like the plain one."""

from __future__ import annotations

import math

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs.bert.modeling import ClassifierModel, PretrainingModel
from jobs.bert.tiny import tiny_config, vocabulary

from .conftest import finetune_spec, job_env, loss_lines, pretrain_spec, read_progress, run_job

pytestmark = pytest.mark.tf


@pytest.fixture
def bfloat16_policy():
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def features(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 100, (3, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask,
            "masked_lm_positions": rng.integers(1, 9, (3, 4)).astype(np.int32)}


def test_bf16_heads_work_eagerly_and_match_the_graph(bfloat16_policy):
    config = tiny_config(len(vocabulary()))
    for model, keys in ((PretrainingModel(config), ("mlm_logits", "nsp_logits")),
                        (ClassifierModel(config, 3), ("logits",))):
        eager = model(features(), training=False)
        graph = tf.function(lambda f, m=model: m(f, training=False))(features())
        for k in keys:
            assert eager[k].dtype == tf.float32
            np.testing.assert_allclose(eager[k].numpy(), graph[k].numpy(), atol=1e-2)
        key = tf.constant([7, 1], tf.int64)
        dropped = model(features(), training=True, seed=key)
        again = model(features(), training=True, seed=key)
        for k in keys:  # stateless dropout: the same key gives the same masks, eagerly too
            assert np.all(np.isfinite(dropped[k].numpy()))
            np.testing.assert_array_equal(dropped[k].numpy(), again[k].numpy())


@pytest.mark.slow
def test_a_bfloat16_spec_trains(tmp_path, tiny_dir, job_here):
    spec = pretrain_spec(tmp_path, tiny_dir, num_train_steps=30, save_checkpoints_steps=30,
                         steps_per_execution=10, precision="bfloat16", export_bert_dir=False)
    proc = job_here(spec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_progress(tmp_path / "pretrain")
    assert record["device"]["precision"] == "bfloat16" and record["step"] == 30
    losses = loss_lines(proc.stderr)
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    # Weights stay float32 (mixed precision): the checkpoint holds float32 variables.
    reader = tf.train.load_checkpoint(str(tmp_path / "pretrain" / "ckpt-30"))
    dtypes = reader.get_variable_to_dtype_map()
    assert {dtypes[k] for k in dtypes if k.startswith("model/")} == {tf.float32}


def final_weights(model_dir, step):
    reader = tf.train.load_checkpoint(str(model_dir / f"ckpt-{step}"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/")}


@pytest.fixture
def no_dropout_dir(tiny_dir, tmp_path):
    """The tiny BERT without dropout: runs that differ only in how the step is compiled or
    split over replicas must then agree to float noise (with dropout, XLA's stateless RNG draws
    other masks than TensorFlow's kernels -- a run keeps its XLA setting when it resumes)."""
    import json
    import shutil

    d = tmp_path / "tiny-no-dropout"
    shutil.copytree(tiny_dir, d)
    config = json.loads((d / "bert_config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (d / "bert_config.json").write_text(json.dumps(config))
    return d


@pytest.mark.slow
@pytest.mark.long
def test_the_xla_compiled_step_trains_like_the_plain_one(tmp_path, no_dropout_dir):
    """TPUCTL_XLA=1 compiles the whole step on one replica (forward, backward, AdamW and its
    assignments: the single-GPU path), and forward/backward plus AdamW's arithmetic with two
    replicas (the multi-GPU path). Without dropout both end where the uncompiled single-replica
    run ends, to float noise: the same global batches, the same updates."""
    settings = {"num_train_steps": 12, "save_checkpoints_steps": 12, "steps_per_execution": 12,
                "dev_file": None, "classifier_dropout": 0.0}
    runs = {}
    for name, env in (("plain", job_env()), ("xla", job_env(TPUCTL_XLA="1")),
                      ("xla2", job_env(TPUCTL_XLA="1", TPUCTL_CPU_REPLICAS="2"))):
        (tmp_path / name).mkdir()
        proc = run_job(finetune_spec(tmp_path / name, no_dropout_dir, **settings), env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert ("XLA" in proc.stderr.split("replica(s)")[1].splitlines()[0]) == (name != "plain")
        runs[name] = final_weights(tmp_path / name / "run", 12)
    initial = tf.train.load_checkpoint(str(no_dropout_dir / "bert_model.ckpt"))
    name = "bert/encoder/layer_0/attention/self/query/kernel"
    key = "model/" + name.replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"
    moved = np.abs(runs["plain"][key] - initial.get_tensor(name)).max()
    for run in ("xla", "xla2"):
        worst = max(np.abs(runs[run][k] - w).max() for k, w in runs["plain"].items())
        assert worst < 2e-3 * moved, (run, worst, moved)
