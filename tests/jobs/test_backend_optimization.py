"""The JAX runner's AdamW (:class:`jobs.optimization.StatelessAdamW`, keras.ops) takes the steps
of the TensorFlow runner's (:class:`jobs.optimization.AdamWeightDecay`): the same values and
moments after N steps on the same gradients, on the TensorFlow backend and on JAX (a subprocess
with KERAS_BACKEND=jax, the update traced by ``jax.jit`` as the runner traces it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs.optimization import AdamWeightDecay, StatelessAdamW

pytestmark = pytest.mark.tf

REPO = Path(__file__).resolve().parents[2]
SETTINGS = {"init_lr": 0.05, "num_train_steps": 8, "num_warmup_steps": 3, "weight_decay_rate": 0.01}
STEPS = 7  # warm-up, decay, and the end of the schedule (lr 0 at step 8)
# float32 on both sides. Measured: bitwise equal on the TensorFlow backend; on JAX (XLA fuses and
# reorders the arithmetic) values within 1.2e-7 (one ulp of a weight near 1), moments 7.5e-9.
ATOL, RTOL = 2e-7, 1e-6


def problem(seed: int = 0):
    """Initial values and a gradient per step: a decayed kernel, an undecayed bias and
    LayerNorm gamma; the first steps' global norm is above 1 (clipped), the later ones below."""
    rng = np.random.default_rng(seed)
    shapes = {"layer/kernel": (4, 3), "layer/bias": (3,), "layer/LayerNorm/gamma": (3,),
              "cls/output_weights": (2, 3)}
    values = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    grads = [{n: (rng.standard_normal(s) * (2.0 if step < 3 else 0.05)).astype(np.float32)
              for n, s in shapes.items()} for step in range(STEPS)]
    return values, grads


def with_tensorflow(values, grads):
    variables = {n: tf.Variable(v) for n, v in values.items()}
    opt = AdamWeightDecay(variables, **SETTINGS)
    lrs = []
    for g in grads:
        lrs.append(float(opt.apply_gradients([tf.constant(g[n]) for n in opt.names])))
    out = {n: v.numpy() for n, v in variables.items()}
    out.update({k: v.numpy() for k, v in opt.slots().items()})
    return out, lrs


def stateless(values, grads):
    opt = StatelessAdamW(values, **SETTINGS)
    current, slots = [values[n] for n in opt.names], opt.slot_values()
    lrs = []
    for step, g in enumerate(grads):
        lrs.append(float(opt.learning_rate(step)))
        current, slots = opt.stateless_apply(current, slots, [g[n] for n in opt.names], step)
    out = dict(zip(opt.names, (np.asarray(v) for v in current)))
    out.update({k: np.asarray(v) for k, v in slots.items()})
    return out, lrs


JAX_SCRIPT = """
import sys
import numpy as np
import jax, keras
from jobs.optimization import StatelessAdamW
assert keras.backend.backend() == "jax"
data = np.load(sys.argv[1])
settings = {k[9:]: data[k].item() for k in data.files if k.startswith("settings/")}
names = sorted(k[6:] for k in data.files if k.startswith("value/"))
steps = int(data["steps"])
opt = StatelessAdamW({n: data["value/" + n] for n in names}, **settings)
step_fn = jax.jit(opt.stateless_apply)
current, slots = [jax.numpy.asarray(data["value/" + n]) for n in opt.names], opt.slot_values()
lrs = []
for step in range(steps):
    lrs.append(float(opt.learning_rate(step)))
    grads = [data[f"grad/{step}/{n}"] for n in opt.names]
    current, slots = step_fn(current, slots, grads, np.int32(step))
out = dict(zip(opt.names, (np.asarray(v) for v in current)))
out.update({k: np.asarray(v) for k, v in slots.items()})
np.savez(sys.argv[2], lrs=np.array(lrs), **{"out/" + k: v for k, v in out.items()})
"""


def assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k, value in want.items():
        np.testing.assert_allclose(got[k], value, atol=ATOL, rtol=RTOL, err_msg=k)


def test_slots_schedule_and_decay_are_the_tensorflow_optimizers():
    values, _ = problem()
    opt = StatelessAdamW(values, **SETTINGS)
    reference = AdamWeightDecay({n: tf.Variable(v) for n, v in values.items()}, **SETTINGS)
    assert opt.names == reference.names
    assert set(opt.slot_values()) == set(reference.slots())
    assert all(not v.any() and v.dtype == np.float32 for v in opt.slot_values().values())
    assert opt.decay == reference.decay == [0.01, 0.0, 0.0, 0.01]  # cls, LayerNorm, bias, kernel
    for step in range(10):
        reference.step.assign(step)
        assert float(opt.learning_rate(step)) == float(reference.current_learning_rate())


def test_steps_on_the_tensorflow_backend_match_adam_weight_decay():
    values, grads = problem()
    want, want_lrs = with_tensorflow(values, grads)
    got, lrs = stateless(values, grads)
    assert lrs == want_lrs
    assert_same(got, want)
    moved = max(np.abs(want[n] - values[n]).max() for n in values)
    assert moved > 0.1  # the steps did something


@pytest.mark.slow
def test_steps_on_the_jax_backend_match_adam_weight_decay(tmp_path):
    pytest.importorskip("jax")
    values, grads = problem()
    want, want_lrs = with_tensorflow(values, grads)
    arrays = {f"value/{n}": v for n, v in values.items()}
    arrays.update({f"grad/{i}/{n}": g for i, step in enumerate(grads) for n, g in step.items()})
    arrays.update({f"settings/{k}": np.array(v) for k, v in SETTINGS.items()})
    np.savez(tmp_path / "in.npz", steps=np.array(len(grads)), **arrays)
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", JAX_SCRIPT, str(tmp_path / "in.npz"),
                           str(tmp_path / "out.npz")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(out["lrs"], want_lrs, rtol=1e-7)
    assert_same({k[4:]: out[k] for k in out.files if k.startswith("out/")}, want)
