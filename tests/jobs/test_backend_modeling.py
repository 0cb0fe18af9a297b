"""The BERT math (jobs/bert/modeling.py and the BERT jobs' device hooks, keras.ops) computes the
same numbers on Keras 3's JAX backend as on TensorFlow, and JAX's dropout masks do not depend on
how the global batch is sharded.

The same weights (an original checkpoint written by ``tf.compat.v1.train.Saver``, and every head's
variables from an .npz) go through this module's :func:`compute` here, on the TensorFlow
backend, and in a subprocess with ``KERAS_BACKEND=jax`` (Keras picks its backend once per
process): the encoder's outputs, the pretraining, classifier and SQuAD heads' logits, each job's
loss, metrics, evaluation sums and prediction outputs, and the loss's gradient agree to float32
noise, and both match the independent float64 reference of the original's math
(tests/jobs/reference.py) as tightly. Measured on this machine's CPU: against the reference,
sequence output 8.7e-7 (TensorFlow) and 8.4e-7 (JAX), pooled output 4.3e-7 and 6.3e-7; JAX
against TensorFlow at most 1.9e-6 (next-sentence logits of magnitude 7, 3e-7 relative), 1.4e-6
for the sequence output; the gradients to 6.3e-7 of each model's largest gradient entry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from . import reference
from .test_parity import CONFIG, inputs, original_arrays, write_with_tf1_saver

# one worker for the module: its fixture (a JAX process and a TensorFlow run over the same
# weights, 80 s on 2 cores) is made once, not once per worker that gets one of its tests
pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.xdist_group("backend-modeling")]

REPO = Path(__file__).resolve().parents[2]
LABELS = 3
ENCODER_TOLERANCE = 1e-5   # each backend against the float64 reference (measured 8.7e-7)
BACKENDS_TOLERANCE = 5e-6  # JAX against TensorFlow, every output (measured 1.9e-6)
GRADIENT_TOLERANCE = 1e-5  # relative to the model's largest gradient entry (measured 6.3e-7)


def head_arrays(seed: int = 4) -> dict[str, np.ndarray]:
    """The heads the original checkpoint of test_parity lacks: the masked-LM transform, the
    classifier's and SQuAD's output layers."""
    rng = np.random.default_rng(seed)
    h = CONFIG["hidden_size"]
    shapes = {"cls/predictions/transform/dense/kernel": (h, h),
              "cls/predictions/transform/dense/bias": (h,),
              "cls/predictions/transform/LayerNorm/gamma": (h,),
              "cls/predictions/transform/LayerNorm/beta": (h,),
              "output_weights": (LABELS, h), "output_bias": (LABELS,),
              "cls/squad/output_weights": (2, h), "cls/squad/output_bias": (2,)}
    out = {}
    for name, shape in shapes.items():
        scale = 1.0 / np.sqrt(shape[-1]) if len(shape) == 2 else 0.3
        value = rng.standard_normal(shape) * scale + (1.0 if name.endswith("gamma") else 0.0)
        out[name] = value.astype(np.float32)
    return out


def features(seed: int = 6) -> dict[str, np.ndarray]:
    """A batch every job's hooks read: padded examples, repeated masked-LM positions, a
    weight-0 classifier row."""
    token_ids, segment_ids, mask = inputs()
    rng = np.random.default_rng(seed)
    batch, seq = token_ids.shape
    positions = rng.integers(1, 8, (batch, 4)).astype(np.int32)
    positions[:, 3] = 0  # padding predictions (weight 0), as the original's data has them
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": mask,
            "masked_lm_positions": positions,
            "masked_lm_ids": rng.integers(0, CONFIG["vocab_size"], (batch, 4)).astype(np.int32),
            "masked_lm_weights": np.array([[1, 1, 1, 0]] * batch, np.float32),
            "next_sentence_labels": rng.integers(0, 2, (batch,)).astype(np.int32),
            "label": rng.integers(0, LABELS, (batch,)).astype(np.int32),
            "weight": np.array([1.0] * (batch - 1) + [0.0], np.float32),
            "index": np.arange(batch, dtype=np.int32),
            "start_positions": rng.integers(0, seq, (batch,)).astype(np.int32),
            "end_positions": rng.integers(0, seq, (batch,)).astype(np.int32),
            "feature_index": np.arange(batch, dtype=np.int32)}


def compute(bert_dir: str, heads_npz: str, out_npz: str) -> None:
    """Every number the comparison needs, on this process's Keras backend, into ``out_npz``."""
    import keras

    from jobs.bert import load_encoder, modeling, read_config
    from jobs.bert.classifier import ClassifierJob
    from jobs.bert.pretrain import PretrainJob
    from jobs.bert.squad_job import SquadJob
    from jobs.bert.weights import restore

    backend = keras.backend.backend()
    prefix = f"{bert_dir}/bert_model.ckpt"
    heads = dict(np.load(heads_npz))
    config = read_config(bert_dir)
    f = features()
    out: dict[str, np.ndarray] = {}

    def put(key, value):
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{key}/{k}", v)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                put(f"{key}/{i}", v)
        else:
            out[key] = np.asarray(keras.ops.convert_to_numpy(value))

    encoder = load_encoder(bert_dir)  # the original checkpoint, read as on TensorFlow
    put("encoder", encoder({k: f[k] for k in ("token_ids", "segment_ids", "padding_mask")}))
    jobs = {"pretrain": (modeling.PretrainingModel(config), PretrainJob),
            "classifier": (modeling.ClassifierModel(config, LABELS), ClassifierJob),
            "squad": (modeling.SquadModel(config), SquadJob)}
    for name, (model, job_class) in jobs.items():
        variables = model.original_variables()
        from_checkpoint = {k: v for k, v in variables.items() if k not in heads}
        restore(from_checkpoint, prefix)
        for k, v in variables.items():
            if k in heads:
                v.assign(heads[k])
        job = object.__new__(job_class)  # the hooks read nothing of the spec
        put(f"{name}/outputs", model(f, training=False))
        put(f"{name}/loss_counts", job.loss_counts(f))
        put(f"{name}/loss", job.loss(model, f, training=False))
        if hasattr(job, "eval_sums"):
            put(f"{name}/eval_sums", job.eval_sums(model, f))
        for hook in ("test_outputs", "predict_outputs"):
            if hasattr(job, hook):
                put(f"{name}/{hook}", getattr(job, hook)(model, f))
        names = sorted(variables)
        put(f"{name}/gradients", dict(zip(names, gradients(backend, model, job, f,
                                                          [variables[n] for n in names]))))
    np.savez(out_npz, **out)


def gradients(backend: str, model, job, f, variables) -> list:
    """d loss / d each variable, on the eval path (no dropout: the backends' masks differ)."""
    if backend == "tensorflow":
        from jobs.job import unwrap

        with tf.GradientTape() as tape:
            loss, _ = job.loss(model, f, training=False)
        grads = tape.gradient(loss, [unwrap(v) for v in variables])
        return [np.zeros(v.shape, np.float32) if g is None else tf.convert_to_tensor(g)
                for v, g in zip(variables, grads)]
    import jax
    import keras

    def loss_of(values):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return job.loss(model, f, training=False)[0]

    return jax.jit(jax.grad(loss_of))([v.value for v in variables])


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("original")
    (d / "bert_config.json").write_text(json.dumps(CONFIG))
    (d / "vocab.txt").write_text("".join(f"tok{i}\n" for i in range(CONFIG["vocab_size"])))
    write_with_tf1_saver(str(d / "bert_model.ckpt"), original_arrays(CONFIG))
    np.savez(d / "heads.npz", **head_arrays())
    return d


def jax_env(devices: int = 1) -> dict:
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
               JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    env.pop("TF_CONFIG", None)
    return env


def run_jax(code: str, *args: str, devices: int = 1) -> str:
    pytest.importorskip("jax")
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=jax_env(devices),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def both(weights_dir, tmp_path_factory) -> tuple[dict, dict]:
    """(TensorFlow's numbers, JAX's numbers) of :func:`compute` on the same weights."""
    out = tmp_path_factory.mktemp("numbers")
    args = (str(weights_dir), str(weights_dir / "heads.npz"))
    run_jax("import sys; from tests.jobs.test_backend_modeling import compute; compute(*sys.argv[1:])",
            *args, str(out / "jax.npz"))
    compute(*args, str(out / "tensorflow.npz"))
    with np.load(out / "tensorflow.npz") as t, np.load(out / "jax.npz") as j:
        return {k: t[k] for k in t.files}, {k: j[k] for k in j.files}


def test_the_encoder_matches_the_original_math_on_both_backends(both):
    token_ids, segment_ids, mask = inputs()
    seq_ref, pooled_ref = reference.bert(original_arrays(CONFIG), 2, 3, token_ids, segment_ids,
                                         mask)
    for numbers in both:
        assert np.abs(numbers["encoder/sequence_output"] - seq_ref).max() < ENCODER_TOLERANCE
        assert np.abs(numbers["encoder/pooled_output"] - pooled_ref).max() < ENCODER_TOLERANCE


def test_heads_losses_metrics_and_eval_sums_agree_across_backends(both):
    tensorflow, jax = both
    values = {k: v for k, v in tensorflow.items() if "/gradients/" not in k}
    assert set(values) <= set(jax) and len(values) > 20
    for key in ("pretrain/outputs/mlm_logits", "pretrain/outputs/nsp_logits",
                "classifier/outputs/logits", "squad/outputs/start_logits",
                "squad/outputs/end_logits", "pretrain/eval_sums/mlm_loss",
                "classifier/test_outputs/1", "squad/predict_outputs/2"):
        assert key in values
    for key, want in values.items():
        got = jax[key]
        assert got.shape == want.shape, key
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(got, want, err_msg=key)
        else:
            assert got.dtype == np.float32, key
            np.testing.assert_allclose(got, want, atol=BACKENDS_TOLERANCE, rtol=0, err_msg=key)


def test_the_losses_gradients_agree_across_backends(both):
    tensorflow, jax = both
    for model in ("pretrain", "classifier", "squad"):
        keys = [k for k in tensorflow if k.startswith(f"{model}/gradients/")]
        assert len(keys) > 30
        # relative to the model's largest gradient entry: some are zero but for rounding (the
        # attention's key bias, which the softmax cancels)
        scale = max(np.abs(tensorflow[k]).max() for k in keys)
        for key in keys:
            want, got = tensorflow[key], jax[key]
            if not want.any():  # not reached by the loss (the pooler under SQuAD's head)
                assert not got.any(), key
            assert np.abs(got - want).max() <= GRADIENT_TOLERANCE * scale, key


MASKS = """
import numpy as np, jax, keras
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jobs.backend_ops import fold, uniform_like
from jobs.backend_ops.jax import step_seed
from jobs.bert import modeling
from jobs.bert.config import BertConfig
from tests.jobs.test_backend_modeling import features
from tests.jobs.test_parity import CONFIG

assert len(jax.devices()) == 2
mesh = Mesh(np.array(jax.devices()), ("batch",))
rows, whole = NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())
key = step_seed(7, 3)
out = {}

# one dropout site's mask over a global batch of 4, sharded over 2 devices: each device's half
def site(x, seed):
    seed = fold(seed, 2)
    return uniform_like(x, seed) >= 0.5, modeling.Dropout(0.5)(x, training=True, seed=seed)

x = np.ones((4, 6, 5), np.float32)
one = jax.jit(site)(jax.device_put(x, jax.devices()[0]), key)
two = jax.jit(site, out_shardings=rows)(jax.device_put(x, rows), key)
for i, (a, b) in enumerate(zip(one, two)):
    assert len(b.addressable_shards) == 2
    halves = [np.asarray(s.data) for s in sorted(b.addressable_shards, key=lambda s: s.index[0].start or 0)]
    assert [h.shape[0] for h in halves] == [2, 2]
    out[f"site{i}"] = (np.asarray(a), np.concatenate(halves))

# the whole classifier in training mode (every dropout site), its batch of 3 padded to 4
model = modeling.ClassifierModel(BertConfig.from_dict(CONFIG), 3)
f = {k: np.concatenate([v, v[:1]]) for k, v in features().items()
     if k in ("token_ids", "segment_ids", "padding_mask")}
values = [v.value for v in model.variables]

def train_logits(values, f, seed):
    with keras.StatelessScope(state_mapping=list(zip(model.variables, values))):
        return model(f, training=True, seed=seed)["logits"]

def eval_logits(values, f):
    with keras.StatelessScope(state_mapping=list(zip(model.variables, values))):
        return model(f, training=False)["logits"]

one = jax.jit(train_logits)(values, f, key)
two = jax.jit(train_logits)(jax.device_put(values, whole), jax.device_put(f, rows), key)
out["model"] = (np.asarray(one), np.asarray(two))
out["eval"] = np.asarray(jax.jit(eval_logits)(values, f))
out["other_step"] = np.asarray(jax.jit(train_logits)(values, f, step_seed(7, 4)))
np.savez(__import__("sys").argv[1], **{k + (f"/{i}" if isinstance(v, tuple) else ""): w
         for k, v in out.items() for i, w in (enumerate(v) if isinstance(v, tuple) else [(0, v)])})
"""


def test_jax_dropout_masks_do_not_depend_on_the_sharding_of_the_global_batch(tmp_path):
    """A global batch's masks on one device equal the concatenation of the masks its two halves
    get on a 2-device mesh (threefry, partitionable), for one dropout site and for the whole
    model: a run draws the same masks on 1 chip, 8 chips or 4 hosts."""
    run_jax(MASKS, str(tmp_path / "masks.npz"), devices=2)
    with np.load(tmp_path / "masks.npz") as m:
        got = {k: m[k] for k in m.files}
    for site in ("site0", "site1"):
        np.testing.assert_array_equal(got[f"{site}/0"], got[f"{site}/1"])
    keep = got["site0/0"]
    assert 0.3 < keep.mean() < 0.7 and not (keep == keep[:1]).all()  # masks, not one row repeated
    dropped = got["site1/0"]
    assert set(np.unique(dropped)) == {0.0, 2.0}
    np.testing.assert_array_equal(dropped == 2.0, keep)  # the layer applies the site's mask
    one, two = got["model/0"], got["model/1"]
    np.testing.assert_allclose(two, one, atol=1e-6, rtol=0)  # measured: bitwise equal on a CPU
    # dropout did something, and another step draws other masks
    assert np.abs(one - got["eval"]).max() > 1e-3
    assert np.abs(one - got["other_step"]).max() > 1e-3
