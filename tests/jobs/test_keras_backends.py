"""`job: keras` on both of Keras 3's backends: examples/mlp's spec, unchanged (its model, loss,
metrics and predictions are keras.ops), trains, evaluates, predicts and exports on JAX
(`--set backend=jax`, the step one jax.jit over the global batch); preempted by SIGTERM and run
again it ends bitwise with the weights of an uninterrupted JAX run; on 4 virtual CPU devices
(TPUCTL_CPU_REPLICAS=4) with those of 1 device, within float32 rounding; a checkpoint written on
TensorFlow continues on JAX, ending with the TensorFlow run's weights and eval metrics within
float32 rounding. A module whose device code uses `tf.` ops is refused on JAX before anything
runs: one line naming the file, the line and the keras.ops fix, exit 2.

Every JAX run is a subprocess (`python -m jobs run`): Keras reads its backend once per process,
and this one's is TensorFlow.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from jobs.keras.tfops import refuse_tf_ops

from .conftest import job_env, read_progress, run_job, start_job, wait_for

REPO = Path(__file__).resolve().parents[2]
MLP = REPO / "examples" / "mlp"
STEPS, CKPT = 120, 40

# the example's module, its train split read at 20 ms a batch, so that a SIGTERM lands mid-run
PACED = '''

import time

import tensorflow as tf

_example_dataset = dataset


def dataset(params, split, context):
    ds = _example_dataset(params, split, context)
    if split != "train":
        return ds

    def slow(x):
        time.sleep(0.02)
        return x

    return ds.map(lambda x, y: (tf.ensure_shape(tf.numpy_function(slow, [x], tf.float32), x.shape), y))
'''


def user_code(directory: Path) -> Path:
    """examples/mlp's module (paced) and spec, with STEPS steps and a checkpoint every CKPT."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.py").write_text((MLP / "model.py").read_text() + PACED)
    spec = yaml.safe_load((MLP / "spec.yaml").read_text())
    spec.update(num_train_steps=STEPS, save_checkpoints_steps=CKPT)
    (directory / "spec.yaml").write_text(yaml.safe_dump(spec))
    return directory / "spec.yaml"


def checkpoint(prefix: Path) -> dict[str, np.ndarray]:
    """Weights, AdamW moments, step and input position (not save_counter: the runs saved
    different numbers of times)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if not k.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def run(spec: Path, model_dir: Path, backend: str, **env: str):
    proc = run_job(spec, f"backend={backend}", f"model_dir={model_dir}", env=job_env(**env),
                   timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    return user_code(tmp_path_factory.mktemp("mlp"))


@pytest.fixture(scope="module")
def jax_run(spec, tmp_path_factory) -> Path:
    """The uninterrupted JAX run, on 1 CPU device."""
    model_dir = tmp_path_factory.mktemp("jax") / "run"
    proc = run(spec, model_dir, "jax")
    assert "jobs: backend jax" in proc.stdout + proc.stderr
    assert "1 replica(s), float32, XLA, jax" in proc.stderr
    return model_dir


# -- the refusal: read, not run ---------------------------------------------------------------

LOSS = '''
import keras
import tensorflow as tf


def model(params):
    return keras.Sequential([keras.layers.Dense(2)])


def dataset(params, split, context):
    return tf.data.Dataset.from_tensor_slices(load()).batch(params["batch_size"], drop_remainder=True)


def load():
    return tf.io.gfile.GFile("data.txt").read()


def loss(labels, outputs):
    return keras.ops.mean(smooth(outputs), -1)
'''


OTHERWISE = ", or run it on TensorFlow: --set backend=tensorflow"


@pytest.mark.parametrize("helper, marker, used, fix", [
    ("def smooth(x):\n    return keras.ops.abs(x)\n", None, None, None),
    ("def smooth(x):\n    return tf.reduce_sum(x, -1)\n", "tf.reduce_sum", "tf.reduce_sum in smooth()",
     "use keras.ops.sum"),
    ("def smooth(x):\n    return tf.nn.softmax(x)\n", "tf.nn", "tf.nn.softmax in smooth()",
     "use keras.ops.softmax"),
    ("def smooth(x):\n    return keras.ops.cast(x, tf.float32)\n", "tf.float32", "tf.float32 in smooth()",
     'name the dtype as a string, "float32"'),
    ("def smooth(x):\n    return tf.keras.layers.ReLU()(x)\n", "tf.keras", "tf.keras.layers.ReLU in smooth()",
     "use keras.layers.ReLU (import keras)"),
    ("def smooth(x):\n    return tf.ensure_shape(x, [None, 2])\n", "tf.ensure", "tf.ensure_shape in smooth()",
     "write it with keras.ops"),
    ("SCALE = tf.constant(2.0)\n\n\ndef smooth(x):\n    return x * SCALE\n", "SCALE =",
     "tf.constant in SCALE", "use keras.ops.convert_to_tensor"),
    ("from tensorflow import math as tfm\n\n\ndef smooth(x):\n    return tfm.log1p(x)\n", "tfm.log1p",
     "tf.math.log1p in smooth()", "use keras.ops.log1p"),
], ids=["keras-ops", "reduce_sum", "nn.softmax", "dtype", "tf.keras", "no-equivalent",
        "module-level", "from-import"])
def test_tf_ops_in_the_code_the_device_runs_are_named_with_their_fix(tmp_path, helper, marker, used, fix):
    """tf.data and tf.io in dataset() and in what only dataset() uses are the input pipeline,
    allowed; a tf. use in loss() or in a helper it reaches is named by file and line, with the
    fix. Read, not run: no TensorFlow, no JAX."""
    path = tmp_path / "model.py"
    path.write_text(LOSS + "\n\n" + helper)
    problem = refuse_tf_ops(str(path))
    if marker is None:
        assert problem is None
        return
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text)
    assert problem == (f"{path}:{line}: {used} is TensorFlow, which the jax backend cannot run; "
                       f"{fix}{OTHERWISE}")


def test_device_code_imported_from_a_module_of_the_users_is_read_too(tmp_path):
    (tmp_path / "helpers.py").write_text("import tensorflow as tf\n\n\ndef smooth(x):\n"
                                         "    return tf.math.reduce_sum(x, -1)\n")
    (tmp_path / "model.py").write_text(LOSS.replace("import keras\n", "import keras\n\n"
                                                    "from helpers import smooth\n"))
    assert refuse_tf_ops(str(tmp_path / "model.py")) == (
        f"{tmp_path / 'helpers.py'}:5: tf.math.reduce_sum in smooth() is TensorFlow, which the jax "
        f"backend cannot run; use keras.ops.sum{OTHERWISE}")


def test_the_examples_device_code_is_keras_ops():
    assert refuse_tf_ops(str(MLP / "model.py")) is None
    assert refuse_tf_ops(str(REPO / "examples" / "bert_ner" / "model.py")) is None


@pytest.mark.tf
def test_a_module_with_tf_ops_is_refused_on_jax_before_anything_runs(tmp_path):
    old = '    return {"accuracy": keras.ops.cast(keras.ops.equal(predicted, labels), "float32")}'
    source = (MLP / "model.py").read_text()
    assert source.count(old) == 1
    (tmp_path / "model.py").write_text(source.replace(
        old, '    return {"accuracy": tf.cast(tf.equal(predicted, labels), tf.float32)}'))
    (tmp_path / "spec.yaml").write_text((MLP / "spec.yaml").read_text())
    proc = run_job(tmp_path / "spec.yaml", "backend=jax", f"model_dir={tmp_path / 'run'}")
    line = next(i for i, text in enumerate((tmp_path / "model.py").read_text().splitlines(), 1)
                if "tf.cast(tf.equal" in text)
    errors = [e for e in proc.stderr.splitlines() if "error" in e]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert errors == [(f"tpuctl: error: {tmp_path / 'model.py'}:{line}: tf.cast in metrics() is "
                       f"TensorFlow, which the jax backend cannot run; use keras.ops.cast{OTHERWISE}")]
    assert not list((tmp_path / "run").glob("ckpt-*"))


# what only running tells, on JAX: every case of test_keras_user_code, in one JAX process
DRIVER = """
import contextlib, io, json, sys
from jobs import spec as spec_lib
from jobs.runner.registry import run_spec
out = []
for d in sys.argv[1:]:
    spec = spec_lib.load(d + "/spec.yaml", ["model_dir=" + d + "/run"])
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_spec(spec, search=[d], backend="jax")
    out.append([code, [line for line in err.getvalue().splitlines() if "error" in line]])
print(json.dumps(out))
"""


@pytest.mark.tf
def test_a_mistake_only_running_finds_is_the_same_line_on_jax(tmp_path):
    """The check before the first step, on JAX a trace by jax.make_jaxpr of the global batch:
    each mistake of test_keras_user_code's RUNTIME is the line the TensorFlow backend gives."""
    from .test_keras_user_code import RUNTIME, line_of, module

    dirs, want = [], []
    for i, (old, new, marker, expected) in enumerate(RUNTIME):
        d = tmp_path / str(i)
        d.mkdir()
        path = module(d, old, new)
        (d / "spec.yaml").write_text((MLP / "spec.yaml").read_text())
        dirs.append(str(d))
        want.append([2, [f"tpuctl: error: {path}:{line_of(path, marker)}: {expected}"]])
    proc = subprocess.run([sys.executable, "-c", DRIVER, *dirs], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=job_env(KERAS_BACKEND="jax"), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == want


# -- examples/mlp on JAX -----------------------------------------------------------------------

@pytest.mark.tf
@pytest.mark.long
def test_the_mlp_example_trains_evaluates_predicts_and_exports_on_jax(jax_run):
    import tensorflow as tf

    progress = read_progress(jax_run)
    assert progress["status"] == "finished" and progress["step"] == STEPS
    assert progress["metrics"]["eval_accuracy"] > 0.9
    assert {"predictions.jsonl", "saved_model/"} <= set(progress["outputs"])
    # the checkpoint under the TensorFlow runner's names (model/<path>, optimizer/<path>/adam_m)
    weights = checkpoint(jax_run / f"ckpt-{STEPS}")
    assert "model/hidden.Skernel/.ATTRIBUTES/VARIABLE_VALUE" in weights
    assert any("adam_m" in k for k in weights) and int(weights["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == STEPS
    # predictions of the 100 predict examples; the SavedModel (from JAX, via jax2tf) serves them
    rows = [json.loads(line) for line in (jax_run / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 100 and set(rows[0]) == {"label", "probabilities"}
    spec = importlib.util.spec_from_file_location("mlp_example", MLP / "model.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    params = yaml.safe_load((MLP / "spec.yaml").read_text())["params"]
    features, _ = example.points(params, "predict")
    serve = tf.saved_model.load(str(jax_run / "saved_model")).signatures["serving_default"]
    served = serve(features=tf.constant(features[:37]))  # a batch of another size than the run's
    np.testing.assert_allclose(served["probabilities"].numpy(),
                               np.array([r["probabilities"] for r in rows[:37]]), atol=2e-6)
    assert served["label"].numpy().tolist() == [r["label"] for r in rows[:37]]


@pytest.mark.tf
@pytest.mark.long
def test_a_jax_run_preempted_by_sigterm_and_run_again_ends_bitwise_as_the_uninterrupted_one(
        spec, jax_run, tmp_path):
    model_dir = tmp_path / "run"
    proc = start_job(spec, "backend=jax", f"model_dir={model_dir}", env=job_env())
    wait_for(lambda: (read_progress(model_dir) or {}).get("checkpoint_step"), proc, timeout=240,
             what="the first checkpoint")
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 42, out[-3000:]
    stopped = read_progress(model_dir)
    assert stopped["status"] == "preempted" and CKPT <= stopped["checkpoint_step"] < STEPS, out[-3000:]
    again = run(spec, model_dir, "jax")
    assert f"resumed from {model_dir}/ckpt-{stopped['checkpoint_step']}" in again.stderr
    want, got = checkpoint(jax_run / f"ckpt-{STEPS}"), checkpoint(model_dir / f"ckpt-{STEPS}")
    assert sorted(want) == sorted(got)
    assert [k for k in want if not np.array_equal(want[k], got[k])] == []


@pytest.mark.tf
@pytest.mark.long
def test_four_virtual_devices_on_jax_end_with_the_weights_of_one(spec, jax_run, tmp_path):
    proc = run(spec, tmp_path / "run", "jax", TPUCTL_CPU_REPLICAS="4")
    assert "4 replica(s)" in proc.stderr
    one, four = checkpoint(jax_run / f"ckpt-{STEPS}"), checkpoint(tmp_path / "run" / f"ckpt-{STEPS}")
    assert sorted(one) == sorted(four)
    for key in one:  # one global mean, summed in another order: float32 rounding apart
        np.testing.assert_allclose(four[key], one[key], rtol=1e-4, atol=1e-5, err_msg=key)
    metrics = (read_progress(jax_run)["metrics"], read_progress(tmp_path / "run")["metrics"])
    assert metrics[1]["eval_loss"] == pytest.approx(metrics[0]["eval_loss"], rel=1e-4)
    assert metrics[1]["eval_accuracy"] == metrics[0]["eval_accuracy"]


@pytest.mark.tf
@pytest.mark.long
def test_the_same_spec_on_tensorflow_and_a_tensorflow_checkpoint_continued_on_jax(spec, jax_run,
                                                                                  tmp_path):
    """The backends initialise the model from their own random numbers (Keras' initialisers
    draw from TensorFlow's or JAX's generator), so the two runs end in different places with
    eval metrics close: accuracy within 3 of the 100 eval examples, the loss within 0.1 (0.037
    and 0.069 here; guessing is ln 3 = 1.1). A TensorFlow checkpoint continued on JAX ends with
    the TensorFlow run's weights and metrics within float32 rounding (same names, same AdamW,
    same input stream; 1.8e-7 apart here)."""
    tf_dir = tmp_path / "tf"
    run(spec, tf_dir, "tensorflow")
    on_tf, on_jax = read_progress(tf_dir)["metrics"], read_progress(jax_run)["metrics"]
    assert min(on_tf["eval_accuracy"], on_jax["eval_accuracy"]) >= 0.95
    assert abs(on_tf["eval_accuracy"] - on_jax["eval_accuracy"]) <= 0.03
    assert abs(on_tf["eval_loss"] - on_jax["eval_loss"]) <= 0.1

    continued = tmp_path / "continued"
    continued.mkdir()
    for f in tf_dir.glob(f"ckpt-{CKPT}.*"):
        (continued / f.name).write_bytes(f.read_bytes())
    (continued / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{CKPT}"\n')
    proc = run(spec, continued, "jax")
    assert f"resumed from {continued}/ckpt-{CKPT}" in proc.stderr
    want, got = checkpoint(tf_dir / f"ckpt-{STEPS}"), checkpoint(continued / f"ckpt-{STEPS}")
    assert sorted(want) == sorted(got)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5, err_msg=key)
    metrics = read_progress(continued)["metrics"]
    assert metrics["eval_loss"] == pytest.approx(on_tf["eval_loss"], rel=1e-4, abs=1e-6)
    assert metrics["eval_accuracy"] == on_tf["eval_accuracy"]


@pytest.mark.tf
@pytest.mark.long
def test_bert_ner_fine_tunes_on_jax_to_the_f1_it_reaches_on_tensorflow(tiny_dir, tmp_path):
    """examples/bert_ner, unchanged, from the tiny original BERT checkpoint, on JAX: the trace
    before the first step finds the pooler, which no loss reaches, and leaves it untrained; the
    run reaches the entity F1 the same spec reaches on TensorFlow (tests/jobs/test_bert_ner.py:
    above 0.8 at 100 steps; 0.9643 there and 0.9641 here when measured side by side); the
    SavedModel exported from JAX serves the tags the run predicted."""
    import tensorflow as tf

    example = REPO / "examples" / "bert_ner"
    proc = run_job(example / "spec.yaml", "backend=jax", f"model_dir={tmp_path / 'jax'}",
                   f"params.bert_dir={tiny_dir}", "num_train_steps=100", env=job_env(), timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("2 variable(s) get no gradient from loss() and are not trained: bert/pooler/kernel, "
            "bert/pooler/bias") in proc.stderr
    assert read_progress(tmp_path / "jax")["metrics"]["eval_f1"] > 0.8
    trained = checkpoint(tmp_path / "jax" / "ckpt-100")
    original = tf.train.load_checkpoint(str(tiny_dir / "bert_model.ckpt"))
    assert np.array_equal(trained["model/bert.Spooler.Skernel/.ATTRIBUTES/VARIABLE_VALUE"],
                          original.get_tensor("bert/pooler/dense/kernel"))

    spec = importlib.util.spec_from_file_location("bert_ner_example", example / "model.py")
    ner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ner)
    params = yaml.safe_load((example / "spec.yaml").read_text())["params"]
    features, _ = ner.examples(params["eval_file"], str(tiny_dir), tuple(params["entity_types"]),
                               params["max_seq_length"], params["do_lower_case"])
    serve = tf.saved_model.load(str(tmp_path / "jax" / "saved_model")).signatures["serving_default"]
    served = serve(**{k: tf.constant(v[:5]) for k, v in features.items()})["tags"].numpy()
    rows = [json.loads(line)["tags"] for line in (tmp_path / "jax" / "predictions.jsonl").read_text()
            .splitlines()[:5]]
    assert served.tolist() == rows
