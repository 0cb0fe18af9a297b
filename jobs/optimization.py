"""AdamW with linear warm-up and linear decay, as google-research/bert's optimization.py.

The learning rate at step ``t`` (the step being taken, counting from 0) is

    lr(t) = init_lr * t / warmup                    if t < warmup
    lr(t) = init_lr * (1 - min(t, total) / total)   otherwise

and the update of each variable ``w`` with gradient ``g`` is Adam *without* bias correction,
with weight decay added to the update (decoupled from the moments), except for LayerNorm
parameters and biases:

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    w -= lr * (m / (sqrt(v) + eps) + wd * w)

Gradients are clipped to a global norm of 1.0 first. One deliberate difference: the original on
TPU clipped each core's gradient of its own mean loss and then *summed* across cores (it called
CrossShardOptimizer's apply_gradients on raw gradients); here each replica's loss is its share of
the mean over the global batch (:func:`jobs.runner.runner.loss_totals`), the shares' gradients are
summed across replicas into the gradient of the global mean, and that is clipped, so a run
means the same thing on 1 CPU, 8 GPUs, a v3-8 or a pod slice.

The moments are stored as ``<variable>/adam_m`` and ``<variable>/adam_v``, the original names.

Two implementations of the one rule: :class:`AdamWeightDecay` keeps its variables and updates
them in a ``tf.distribute`` replica context (the TensorFlow runner), :class:`StatelessAdamW`
maps (values, moments, gradients, step) to new values and moments in ``keras.ops`` (the JAX
runner traces it into its one ``jax.jit`` of the step). Both take the schedule
(:func:`learning_rate`), which variables decay (:func:`decay_rates`) and the update of one
variable (:func:`adamw_update`) from this module; only the clipping differs in spelling
(``tf.clip_by_global_norm`` on TensorFlow, bitwise as before; :func:`clip_by_global_norm`, its
formula in ``keras.ops``, for the stateless one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from keras import ops

NO_DECAY = ("LayerNorm", "layer_norm", "bias")


def learning_rate(step, init_lr: float, num_train_steps: int, num_warmup_steps: int):
    """The schedule above, a float32 scalar of the backend (``step`` may be traced)."""
    step = ops.cast(step, "float32")
    decayed = init_lr * (1.0 - ops.minimum(step, float(num_train_steps)) / float(num_train_steps))
    if not num_warmup_steps:
        return decayed
    warm = init_lr * step / float(num_warmup_steps)
    return ops.where(step < float(num_warmup_steps), warm, decayed)


def uses_weight_decay(name: str, exclude: Sequence[str] = NO_DECAY) -> bool:
    return not any(re.search(pattern, name) for pattern in exclude)


def decay_rates(names: Sequence[str], weight_decay_rate: float,
                exclude: Sequence[str] = NO_DECAY) -> list[float]:
    """Each variable's weight decay rate: 0 for LayerNorm parameters and biases."""
    return [weight_decay_rate if uses_weight_decay(n, exclude) else 0.0 for n in names]


def adamw_update(w, m, v, g, lr, wd: float, beta_1: float, beta_2: float, epsilon: float):
    """One variable's step: (new w, new m, new v), Adam without bias correction, the decay
    ``wd * w`` added to the update."""
    m_t = beta_1 * m + (1.0 - beta_1) * g
    v_t = beta_2 * v + (1.0 - beta_2) * ops.square(g)
    update = m_t / (ops.sqrt(v_t) + epsilon)
    if wd:
        update += wd * w
    return w - lr * update, m_t, v_t


def clip_by_global_norm(grads: Sequence[Any], clip_norm: float) -> list:
    """``tf.clip_by_global_norm`` in keras.ops: every gradient scaled by
    ``clip_norm * min(1 / norm, 1 / clip_norm)``, ``norm`` the norm of all of them together
    (an infinite norm gives NaN gradients, as TensorFlow's)."""
    norm = ops.sqrt(sum(ops.sum(ops.square(g)) for g in grads))
    norm = ops.where(ops.isfinite(norm), norm, float("nan"))
    scale = clip_norm * ops.minimum(1.0 / norm, 1.0 / clip_norm)
    return [g * ops.cast(scale, g.dtype) for g in grads]


class AdamWeightDecay(tf.Module):
    """The optimizer over a fixed set of named variables.

    Create it inside ``strategy.scope()`` (its moments and step mirror the model's variables).
    Call :meth:`apply_gradients` in replica context, i.e. inside ``strategy.run``, with each
    replica's gradient of its share of the global mean loss; it sums them across replicas.
    """

    def __init__(self, variables: Mapping[str, tf.Variable], *, init_lr: float,
                 num_train_steps: int, num_warmup_steps: int, weight_decay_rate: float = 0.01,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                 clip_norm: float = 1.0, exclude_from_weight_decay: Sequence[str] = NO_DECAY,
                 jit_compile: bool = False):
        super().__init__(name="AdamWeightDecay")
        self.names = sorted(variables)
        self.variables_ = [variables[n] for n in self.names]
        self.init_lr, self.num_train_steps = float(init_lr), int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.clip_norm = clip_norm
        self.decay = decay_rates(self.names, weight_decay_rate, exclude_from_weight_decay)
        self.m = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name=f"{n}/adam_m")
                  for n, v in zip(self.names, self.variables_)]
        self.v = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name=f"{n}/adam_v")
                  for n, v in zip(self.names, self.variables_)]
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        # With several replicas the all-reduce and the assignment stay outside XLA (merge_call
        # cannot be compiled); the arithmetic in between can be.
        self._updates = tf.function(self.updates, jit_compile=True) if jit_compile else self.updates

    def slots(self) -> dict[str, tf.Variable]:
        """Moments under their original names, for the checkpoint."""
        out = {f"{n}/adam_m": m for n, m in zip(self.names, self.m)}
        out.update({f"{n}/adam_v": v for n, v in zip(self.names, self.v)})
        return out

    def current_learning_rate(self) -> tf.Tensor:
        return learning_rate(self.step, self.init_lr, self.num_train_steps, self.num_warmup_steps)

    def apply_gradients(self, grads: Sequence[tf.Tensor]) -> tf.Tensor:
        """Sum across replicas, clip and apply; returns the learning rate used. Replica context."""
        ctx = tf.distribute.get_replica_context()
        # Embedding lookups give IndexedSlices; the update touches every row anyway (decay).
        grads = [tf.cast(tf.convert_to_tensor(g), tf.float32) for g in grads]
        if ctx.num_replicas_in_sync > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        new_w, new_m, new_v, lr = self._updates(grads)
        # Every replica computed the same values; each assigns its own copy of the variables.
        ctx.merge_call(self._assign, args=(new_w, new_m, new_v))
        return lr

    def updates(self, grads: Sequence[tf.Tensor]):
        """Clip, then AdamW: (new weights, new m, new v, learning rate), assigning nothing."""
        grads, _ = tf.clip_by_global_norm(grads, self.clip_norm)
        lr = self.current_learning_rate()
        new_w, new_m, new_v = [], [], []
        for w, m, v, g, wd in zip(self.variables_, self.m, self.v, grads, self.decay):
            w_t, m_t, v_t = adamw_update(w, m, v, g, lr, wd, self.beta_1, self.beta_2,
                                         self.epsilon)
            new_w.append(w_t)
            new_m.append(m_t)
            new_v.append(v_t)
        return new_w, new_m, new_v, lr

    def _assign(self, strategy, new_w, new_m, new_v):
        def assign(var, value):
            return var.assign(value)

        update = strategy.extended.update
        for var, value in zip(self.variables_ + self.m + self.v, new_w + new_m + new_v):
            update(var, assign, args=(value,), group=False)
        update(self.step, lambda s: s.assign_add(1), group=False)


class StatelessAdamW:
    """The same AdamW as :class:`AdamWeightDecay`, without state of its own: the JAX runner
    keeps the values, the moments (``slot_values``, under the checkpoint names of
    :meth:`AdamWeightDecay.slots`) and the step, and traces :meth:`stateless_apply` into its
    ``jax.jit`` of the train step with the gradient of the global mean loss (no all-reduce
    here: the step sees the global batch). keras.ops only, so it runs on either backend."""

    def __init__(self, variables: Mapping[str, Any], *, init_lr: float, num_train_steps: int,
                 num_warmup_steps: int, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6, clip_norm: float = 1.0,
                 exclude_from_weight_decay: Sequence[str] = NO_DECAY):
        self.names = sorted(variables)
        self.shapes = {n: tuple(int(d) for d in variables[n].shape) for n in self.names}
        self.init_lr, self.num_train_steps = float(init_lr), int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.clip_norm = clip_norm
        self.decay = decay_rates(self.names, weight_decay_rate, exclude_from_weight_decay)

    def slot_values(self) -> dict[str, np.ndarray]:
        """The initial moments (float32 zeros) under their checkpoint names."""
        out = {f"{n}/adam_m": np.zeros(self.shapes[n], np.float32) for n in self.names}
        out.update({f"{n}/adam_v": np.zeros(self.shapes[n], np.float32) for n in self.names})
        return out

    def learning_rate(self, step):
        """The learning rate of the step numbered ``step`` (counting from 0)."""
        return learning_rate(step, self.init_lr, self.num_train_steps, self.num_warmup_steps)

    def stateless_apply(self, values: Sequence[Any], slots: Mapping[str, Any],
                        grads: Sequence[Any], step) -> tuple[list, dict]:
        """Clip, then AdamW at the learning rate of step ``step``: (new values in the order of
        :attr:`names`, new slots)."""
        grads = clip_by_global_norm([ops.cast(g, "float32") for g in grads], self.clip_norm)
        lr = self.learning_rate(step)
        new_values, new_slots = [], dict(slots)
        for name, w, g, wd in zip(self.names, values, grads, self.decay):
            m, v = f"{name}/adam_m", f"{name}/adam_v"
            w_t, new_slots[m], new_slots[v] = adamw_update(
                w, slots[m], slots[v], g, lr, wd, self.beta_1, self.beta_2, self.epsilon)
            new_values.append(w_t)
        return new_values, new_slots
