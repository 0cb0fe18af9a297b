"""A small job on the public job API, run by the JAX runner in this process (the runner's
tests start it as a program: Keras picks its backend once per process).

``python tests/jobs/jax_runner_job.py MODEL_DIR STEPS [KEY=VALUE ...]``: a two-layer regression
with dropout (keyed by the runner's step seed) and a momentum optimizer with a slot per
variable, on a synthetic stream whose example i is a function of i alone. ``finish`` writes the
final weights to ``MODEL_DIR/weights.npz``. Exit code: the runner's.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras
import numpy as np
import tensorflow as tf

from jobs.job import Job
from jobs.runner.jax.runner import JaxRunner
from jobs.spec.base import RunSpec

FEATURES = 8


def examples(ids):
    """Examples ``ids`` of the stream: features a fixed function of the index, the target their
    weighted sum."""
    i = tf.cast(ids, tf.float32)[:, None]
    x = tf.sin(i * 0.37 + tf.range(FEATURES, dtype=tf.float32) * 1.3)
    return {"x": x, "y": tf.reduce_sum(x * tf.linspace(-1.0, 1.0, FEATURES), 1, keepdims=True)}


class Momentum:
    """Stateless momentum SGD: one slot per variable, named as a checkpoint names it."""

    def __init__(self, variables: dict, lr: float = 0.05, beta: float = 0.9):
        self.names = sorted(variables)
        self.shapes = {n: tuple(variables[n].shape) for n in self.names}
        self.lr, self.beta = lr, beta

    def slot_values(self):
        return {f"{n}/momentum": np.zeros(self.shapes[n], np.float32) for n in self.names}

    def learning_rate(self, step):
        return self.lr

    def stateless_apply(self, values, slots, grads, step):
        new_values, new_slots = [], dict(slots)
        for name, w, g in zip(self.names, values, grads):
            m = self.beta * slots[f"{name}/momentum"] + g
            new_slots[f"{name}/momentum"] = m
            new_values.append(w - self.lr * m)
        return new_values, new_slots


class Regression(Job):
    metric_names = ("mae",)

    def build_model(self):
        inputs = keras.Input((FEATURES,))
        hidden = keras.layers.Dense(16, activation="tanh", name="hidden")(inputs)
        return keras.Model(inputs, keras.layers.Dense(1, name="out")(hidden))

    def named_variables(self, model):
        return {v.path: v for v in model.variables}

    def build_optimizer(self, ctx):
        return Momentum(ctx.variables)

    def dataset(self, ctx, position):
        size = self.spec.train_batch_size
        share = ctx.get_per_replica_batch_size(size)  # this pipeline's rows of a global batch
        first = ctx.input_pipeline_id * share
        return (tf.data.Dataset.range(position // size, 1 << 40)
                .map(lambda n: examples(tf.range(n * size + first, n * size + first + share))))

    def loss_counts(self, features):
        return {"examples": keras.ops.cast(keras.ops.shape(features["x"])[0], "float32")}

    def loss(self, model, features, training, seed=None, totals=None):
        x = features["x"]
        if training and seed is not None:  # dropout keyed by the runner's seed of this step
            keep = keras.random.uniform(keras.ops.shape(x), seed=seed) >= 0.1
            x = keras.ops.where(keep, x / 0.9, 0.0)
        error = model(x, training=training) - features["y"]
        total = totals["examples"]
        return (keras.ops.sum(keras.ops.square(error)) / total,
                {"mae": keras.ops.sum(keras.ops.abs(error)) / total})

    def finish(self, ctx):
        np.savez(os.path.join(ctx.model_dir, "weights.npz"),
                 **{n: np.asarray(v.numpy()) for n, v in ctx.variables.items()})
        return {}


def main(argv: list[str]) -> int:
    model_dir, steps = argv[0], int(argv[1])
    values = dict(a.split("=", 1) for a in argv[2:])
    spec = RunSpec(job="keras", model_dir=model_dir, num_train_steps=steps,
                   train_batch_size=int(values.get("batch", 16)), save_checkpoints_steps=int(values.get("save", 5)),
                   steps_per_execution=int(values.get("loop", 5)), keep_checkpoint_max=3)
    return JaxRunner(spec, Regression(spec)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
