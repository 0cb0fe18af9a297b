"""`job: keras` on the JAX backend with datasets written for `model.fit` (tests/jobs/
test_keras_fit_datasets.py runs the same on TensorFlow): a train split
`shuffle(1000, seed).repeat().batch(B, drop_remainder=True)` that never reads `params["start_step"]`
resumes exactly, because the job skips it to its step on either backend, and an eval split whose
last batch is partial is padded with weight-0 examples, so its metrics are the means over the real
examples. The model, loss and metrics are keras.ops (JAX traces them); the input is tf.data on the
host. Each run is a subprocess: Keras reads its backend once per process."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import job_env, run_job
from .test_keras_fit_datasets import (
    MODULE,
    PLAIN,
    SKIPS,
    assert_exact_eval_and_predictions,
    checkpoint,
    resume_from,
    user_code,
)

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.long]

# the module's device code in keras.ops (the JAX backend refuses tf. ops there)
JAX_MODULE = MODULE.replace(
    '''    predicted = tf.argmax(outputs, -1, output_type=tf.int32)
    return {"accuracy": tf.cast(tf.equal(predicted, labels), tf.float32)}''',
    '''    predicted = keras.ops.argmax(outputs, -1)
    return {"accuracy": keras.ops.cast(keras.ops.equal(predicted, keras.ops.cast(labels, predicted.dtype)),
                                       "float32")}''')


def test_a_fit_style_train_split_on_jax_resumes_bitwise_and_its_partial_eval_batch_is_padded(tmp_path):
    assert JAX_MODULE != MODULE
    spec = user_code(tmp_path / "code", PLAIN)
    (tmp_path / "code" / "model.py").write_text(JAX_MODULE.replace("TRAIN_PIPELINE", PLAIN))
    logs = {}
    for name in ("straight", "resumed"):
        if name == "resumed":
            resume_from(tmp_path / "straight", 20, tmp_path / "resumed")
        proc = run_job(spec, "backend=jax", f"model_dir={tmp_path / name}", env=job_env(), timeout=300)
        logs[name] = proc.stdout + proc.stderr
        assert proc.returncode == 0, logs[name][-3000:]
        assert "jobs: backend jax" in logs[name]
    assert SKIPS in logs["straight"] and "warning" not in logs["straight"]
    assert "skipping the 20 batches it yielded before step 20" in logs["resumed"]
    want, got = checkpoint(tmp_path / "straight" / "ckpt-40"), checkpoint(tmp_path / "resumed" / "ckpt-40")
    assert sorted(want) == sorted(got) and any(k.startswith("model/") for k in want)
    assert [k for k in want if not np.array_equal(want[k], got[k])] == []
    assert "eval (batch 32, 3 batches), predict (batch 32, 3 batches)" in logs["straight"]
    for name in ("straight", "resumed"):
        assert_exact_eval_and_predictions(tmp_path / name, 40)
