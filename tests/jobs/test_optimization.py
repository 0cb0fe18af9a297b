"""AdamW and its learning-rate schedule, as google-research/bert's optimization.py."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs.optimization import AdamWeightDecay, learning_rate, uses_weight_decay

pytestmark = pytest.mark.tf


def test_schedule_warms_up_linearly_then_decays_linearly_to_zero():
    lr = lambda step: float(learning_rate(step, 1e-4, 1000, 100))
    assert lr(0) == 0.0
    assert lr(50) == pytest.approx(5e-5)
    assert lr(99) == pytest.approx(9.9e-5)
    assert lr(100) == pytest.approx(1e-4 * 0.9)  # warm-up over: the decayed value
    assert lr(550) == pytest.approx(1e-4 * 0.45)
    assert lr(1000) == 0.0 and lr(1500) == 0.0
    assert float(learning_rate(0, 1e-4, 1000, 0)) == pytest.approx(1e-4)


def test_layer_norm_and_biases_get_no_weight_decay():
    assert uses_weight_decay("bert/encoder/layer_0/attention/self/query/kernel")
    assert uses_weight_decay("cls/seq_relationship/output_weights")
    assert not uses_weight_decay("bert/encoder/layer_0/output/LayerNorm/gamma")
    assert not uses_weight_decay("bert/pooler/dense/bias")
    assert not uses_weight_decay("cls/predictions/output_bias")


def test_one_step_matches_the_formula_without_bias_correction():
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
    b0 = np.array([0.1, -0.2], np.float32)
    variables = {"layer/kernel": tf.Variable(w0), "layer/bias": tf.Variable(b0)}
    opt = AdamWeightDecay(variables, init_lr=0.1, num_train_steps=10, num_warmup_steps=0,
                          weight_decay_rate=0.01)
    gw = np.array([[3.0, 0.0], [0.0, 4.0]], np.float32)  # global norm 5 -> clipped to 1
    gb = np.zeros(2, np.float32)
    opt.apply_gradients([tf.constant(gb), tf.constant(gw)])  # sorted by name: bias, kernel
    g = gw / 5.0
    m, v = 0.1 * g, 0.001 * g * g
    expected = w0 - 0.1 * (m / (np.sqrt(v) + 1e-6) + 0.01 * w0)  # lr at step 0 is 0.1
    np.testing.assert_allclose(variables["layer/kernel"].numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(variables["layer/bias"].numpy(), b0)  # zero grad, no decay
    assert int(opt.step.numpy()) == 1
    assert set(opt.slots()) == {"layer/kernel/adam_m", "layer/kernel/adam_v",
                                "layer/bias/adam_m", "layer/bias/adam_v"}
    # Second step: the learning rate has decayed by one tenth.
    assert float(opt.current_learning_rate()) == pytest.approx(0.09)
