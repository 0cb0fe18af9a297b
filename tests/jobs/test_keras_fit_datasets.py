"""`job: keras` with datasets written for `model.fit`, as every Keras tutorial writes them: a
train split `shuffle(1000, seed).repeat().batch(B, drop_remainder=True)` that never reads
`params["start_step"]`, and eval / predict splits `.batch(B)` whose last batch is partial.

The job skips a resumed train split to its step, so a run killed after a checkpoint (SIGKILL:
its checkpoint copied to a new model_dir) or stopped by SIGTERM (exit 42) ends bitwise with the
weights of an uninterrupted run; it pads a partial eval or predict batch with weight-0
examples, so eval metrics are the means over the real examples (checked against numpy) and
predictions.jsonl holds exactly the real examples. A train split that yields other batches each
time it is built (unseeded randomness) cannot be resumed exactly: one line of the log says so.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import yaml

from .conftest import job_env, read_progress, run_job, start_job, wait_for

pytestmark = [pytest.mark.tf]

TRAIN, EVAL = 300, 70  # 300 / 16: epochs end mid-batch; 70 / 32 (or 2 x 16): a partial last batch

MODULE = '''
import keras
import numpy as np
import tensorflow as tf

SEEDS = {"train": 1, "eval": 2, "predict": 3}


def points(params, split):
    rng = np.random.default_rng([params["data_seed"], SEEDS[split]])
    n = params["train_examples"] if split == "train" else params["eval_examples"]
    x = rng.normal(size=(n, 8)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int32)


def model(params):
    inputs = keras.Input(shape=(8,), name="features")
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, name="logits")(hidden))


def dataset(params, split, context):
    ds = tf.data.Dataset.from_tensor_slices(points(params, split))
    if split == "train":
        return TRAIN_PIPELINE
    return ds.batch(params["batch_size"])


def loss(labels, outputs):
    return keras.losses.sparse_categorical_crossentropy(labels, outputs, from_logits=True)


def metrics(labels, outputs):
    predicted = tf.argmax(outputs, -1, output_type=tf.int32)
    return {"accuracy": tf.cast(tf.equal(predicted, labels), tf.float32)}


def predict(outputs):
    return {"logits": outputs}
'''
# the tutorial's pipeline: seeded, so it yields the same stream each time it is built
PLAIN = 'ds.shuffle(1000, seed=params["seed"]).repeat().batch(params["batch_size"], drop_remainder=True)'
# the same, 20 ms a batch, so that a SIGTERM lands mid-run on any machine
PACED = PLAIN + ('.map(lambda x, y: (tf.ensure_shape(tf.numpy_function(lambda a: (__import__("time")'
                 '.sleep(0.02), a)[1], [x], tf.float32), x.shape), y))')
# a generator that draws without a seed: neither skipping nor saving an iterator can replay it
UNSEEDED = ('tf.data.Dataset.from_generator(lambda: (np.random.default_rng().normal(size=8)'
            '.astype(np.float32) for _ in iter(int, 1)), output_signature=tf.TensorSpec([8], tf.float32))'
            '.map(lambda x: (x, tf.cast(x[0] > 0, tf.int32))).batch(params["batch_size"], '
            'drop_remainder=True)')
SPEC = {"job": "keras", "module": "model.py", "model_dir": None,
        "params": {"train_examples": TRAIN, "eval_examples": EVAL, "data_seed": 1},
        "train_batch_size": 16, "eval_batch_size": 32, "predict_batch_size": 32,
        "num_train_steps": 40, "learning_rate": 0.01, "save_checkpoints_steps": 20,
        "steps_per_execution": 10}

SKIPS = "does not read params['start_step']: a resumed run skips the batches read before it"
WARNS = ("warning: dataset(params, 'train', context) does not read params['start_step'] and yields "
         "other batches each time it is built: a resumed run cannot be exact")


def user_code(directory: Path, pipeline: str = PLAIN, **spec) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.py").write_text(MODULE.replace("TRAIN_PIPELINE", pipeline))
    (directory / "spec.yaml").write_text(yaml.safe_dump({**SPEC, **spec}))
    return directory / "spec.yaml"


def checkpoint(prefix: Path) -> dict[str, np.ndarray]:
    """Weights, Adam moments, step and input position (not save_counter: the runs saved
    different numbers of times)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if not k.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def resume_from(source: Path, step: int, target: Path) -> None:
    """``target`` as a run killed (SIGKILL) right after ``source``'s checkpoint at ``step``
    left it: that checkpoint and nothing else."""
    target.mkdir(parents=True)
    for f in source.glob(f"ckpt-{step}.*"):
        shutil.copy(f, target / f.name)
    (target / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{step}"\n')


def points(split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The module's eval (2) or predict (3) points, made here as the module makes them."""
    rng = np.random.default_rng([1, split_seed])
    x = rng.normal(size=(EVAL, 8)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int32)


def logits_of(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    def w(name):
        return weights[f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE"].astype(np.float64)

    hidden = np.maximum(x @ w("hidden.Skernel") + w("hidden.Sbias"), 0.0)
    return hidden @ w("logits.Skernel") + w("logits.Sbias")


def assert_exact_eval_and_predictions(model_dir: Path, steps: int) -> None:
    """eval_loss and eval_accuracy are the means over the 70 real examples (numpy, from the final
    checkpoint's weights); predictions.jsonl has one row per real example, in order."""
    weights = checkpoint(model_dir / f"ckpt-{steps}")
    x, y = points(2)
    logits = logits_of(weights, x)
    shifted = logits - logits.max(axis=1, keepdims=True)
    losses = np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(EVAL), y]
    metrics = read_progress(model_dir)["metrics"]
    assert metrics["eval_loss"] == pytest.approx(losses.mean(), rel=1e-5)
    assert metrics["eval_accuracy"] == pytest.approx((logits.argmax(axis=1) == y).mean(), abs=1e-6)
    rows = [json.loads(line) for line in (model_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == EVAL
    np.testing.assert_allclose(np.array([r["logits"] for r in rows]), logits_of(weights, points(3)[0]),
                               rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def fit_runs(tmp_path_factory):
    """The tutorial pipeline trained 40 steps straight, and again resumed at 20 from the straight
    run's checkpoint (as a SIGKILL right after it leaves it), in this process."""
    from jobs import spec as spec_lib
    from jobs.runner.registry import run_spec

    root = tmp_path_factory.mktemp("fit")
    spec_path = user_code(root / "code")
    logs = {}
    for name in ("straight", "resumed"):
        if name == "resumed":
            resume_from(root / "straight", 20, root / "resumed")
        spec = spec_lib.load(str(spec_path), [f"model_dir={root / name}"])
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = run_spec(spec, search=[str(root / "code")])
        logs[name] = err.getvalue()
        assert code == 0, logs[name][-3000:]
    return root, logs


def test_a_fit_style_train_split_that_ignores_start_step_resumes_bitwise(fit_runs):
    root, logs = fit_runs
    assert SKIPS in logs["straight"] and "warning" not in logs["straight"]
    assert "skipping the 20 batches it yielded before step 20" in logs["resumed"]
    want, got = checkpoint(root / "straight" / "ckpt-40"), checkpoint(root / "resumed" / "ckpt-40")
    assert sorted(want) == sorted(got) and any(k.startswith("model/") for k in want)
    assert [k for k in want if not np.array_equal(want[k], got[k])] == []
    halfway = checkpoint(root / "straight" / "ckpt-20")  # the resume had 20 steps left to do
    assert not np.array_equal(halfway["model/logits.Skernel/.ATTRIBUTES/VARIABLE_VALUE"],
                              want["model/logits.Skernel/.ATTRIBUTES/VARIABLE_VALUE"])


def test_a_partial_last_eval_batch_is_padded_and_metrics_are_over_the_real_examples(fit_runs):
    root, logs = fit_runs
    assert "eval (batch 32, 3 batches), predict (batch 32, 3 batches)" in logs["straight"]
    for name in ("straight", "resumed"):
        assert_exact_eval_and_predictions(root / name, 40)


@pytest.mark.slow
@pytest.mark.long
def test_two_replicas_stopped_by_sigterm_resume_bitwise_and_pad_eval_to_whole_global_batches(tmp_path):
    """Two replicas: each step takes two batches of the pipeline, so the resume skips twice the
    steps; the eval split's 5 per-replica batches (16, 16, 16, 16, 6) are padded and one weight-0
    batch completes the third global batch."""
    env = job_env(TPUCTL_CPU_REPLICAS="2", TPUCTL_HEARTBEAT_SECONDS="0.2")
    settings = {"num_train_steps": 60, "steps_per_execution": 5}
    straight = run_job(user_code(tmp_path / "a", PACED, **settings), "model_dir=" + str(tmp_path / "a" / "run"),
                       env=env)
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "2 replica(s)" in straight.stderr and "eval (batch 32, 3 batches)" in straight.stderr

    spec = user_code(tmp_path / "b", PACED, **settings)
    b_dir = tmp_path / "b" / "run"
    proc = start_job(spec, f"model_dir={b_dir}", env=env)
    wait_for(lambda: 25 <= ((read_progress(b_dir) or {}).get("step") or 0), proc, what="step 25")
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 42, output[-3000:]
    stopped = read_progress(b_dir)["checkpoint_step"]
    assert 25 <= stopped < 60
    resumed = run_job(spec, f"model_dir={b_dir}", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"skipping the {2 * stopped} batches it yielded before step {stopped}" in resumed.stderr

    want, got = checkpoint(tmp_path / "a" / "run" / "ckpt-60"), checkpoint(b_dir / "ckpt-60")
    assert sorted(want) == sorted(got)
    assert [k for k in want if not np.array_equal(want[k], got[k])] == []
    assert_exact_eval_and_predictions(b_dir, 60)


@pytest.mark.parametrize("pipeline, skips, warns", [
    (PLAIN, True, False),
    (UNSEEDED, False, True),
    ("train_batches(points(params, split), params, context)", False, False),
], ids=["seeded", "unseeded-generator", "honours-start-step"])
def test_a_train_split_that_cannot_be_replayed_is_one_warning_line(tmp_path, job_here, pipeline, skips, warns):
    spec = user_code(tmp_path, pipeline, num_train_steps=2, save_checkpoints_steps=2,
                     steps_per_execution=1)
    if "train_batches" in pipeline:
        model = tmp_path / "model.py"
        model.write_text("from jobs.keras.inputs import train_batches\n" + model.read_text())
    result = job_here(spec, f"model_dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (SKIPS in result.stderr) is skips
    warnings = [line for line in result.stderr.splitlines() if line.startswith("jobs: warning")]
    assert len(warnings) == warns and all(WARNS in line for line in warnings)


def test_eval_batches_bigger_than_the_batch_size_are_one_line_before_the_first_step(tmp_path, job_here):
    spec = user_code(tmp_path)
    model = tmp_path / "model.py"
    model.write_text(model.read_text().replace('return ds.batch(params["batch_size"])', "return ds.batch(64)"))
    result = job_here(spec, f"model_dir={tmp_path / 'run'}")
    assert result.returncode == 2
    line = next(i for i, text in enumerate(model.read_text().splitlines(), 1) if text.startswith("def dataset("))
    assert [text for text in result.stderr.splitlines() if text.startswith("tpuctl: error")] == [
        (f"tpuctl: error: {model}:{line}: dataset(params, 'eval', context) yields batches of more than "
         "params['batch_size'] (32) examples; batch with .batch(params['batch_size'])")]
    assert not list((tmp_path / "run").glob("ckpt-*"))
