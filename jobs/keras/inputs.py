"""Helpers for the ``dataset(params, split, context)`` of a ``job: keras`` module.

The runner's contract for the train split (docs/own-code.md): the dataset yields this input
pipeline's per-replica batches, forever, from global step ``params["start_step"]`` on, and
global batch N is a function of (data, seed, N) alone, of which each host yields its part, in
replica order. Then a run resumed at any step, on any number of hosts, reads exactly what an
uninterrupted run on one host reads. :func:`train_batches` does that for a data set held in
memory: epoch after epoch, every example once per epoch, in an order that is a pure function of
(seed, epoch), entered at any step by arithmetic (no iterator state, no shuffle buffer).

The eval and predict splits are read once, in order: :func:`eval_batches` pads the last global
batch with weight-0 examples (so every batch has the static shape a TPU needs and no example is
dropped), gives each host its part and adds the weights as the element's third part.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

_FOREVER = 1 << 62
_EPOCH_ORDER = 1   # keeps this helper's stateless keys apart from other uses of the seed


def _sizes(params: dict, context: tf.distribute.InputContext) -> tuple[int, int, int]:
    """(global batch, this host's part of it, per-replica batch)."""
    global_batch = int(params["global_batch_size"])
    hosts = context.num_input_pipelines
    if global_batch % hosts:
        raise ValueError(f"global batch {global_batch} does not divide over {hosts} hosts")
    return global_batch, global_batch // hosts, int(params["batch_size"])


def _count(examples: Any) -> int:
    sizes = {len(np.asarray(a)) if not isinstance(a, tf.Tensor) else int(a.shape[0])
             for a in tf.nest.flatten(examples)}
    if len(sizes) != 1:
        raise ValueError(f"the arrays of examples differ in length ({sorted(sizes)}); give every "
                         "array one row per example")
    return sizes.pop()


def epoch_order(n: int, seed: int, epoch) -> tf.Tensor:
    """The order of the ``n`` examples in ``epoch``: a permutation of ``range(n)`` (int64), a
    pure function of (seed, epoch)."""
    key = tf.random.experimental.stateless_fold_in(tf.constant([seed, _EPOCH_ORDER], tf.int64),
                                                   tf.cast(epoch, tf.int64))
    return tf.random.experimental.index_shuffle(tf.range(n, dtype=tf.int64), tf.cast(key, tf.int64),
                                                max(n - 1, 0))


def train_batches(examples: Any, params: dict, context: tf.distribute.InputContext) -> tf.data.Dataset:
    """The train split of an in-memory data set, as the runner's contract wants it.

    ``examples``: a structure of arrays (numpy or tensors) with one row per example, e.g.
    ``(features, labels)`` or ``({"tokens": ..., "mask": ...}, labels)``; the dataset yields
    that structure per batch. Global batch N is the examples at positions ``[N * B, (N + 1) * B)``
    of the stream "epoch 0's order, then epoch 1's, ...", starting at step
    ``params["start_step"]``; this host yields its ``B / hosts`` of it, in per-replica batches.
    """
    n = _count(examples)
    global_batch, per_host, per_replica = _sizes(params, context)
    host = context.input_pipeline_id
    epoch, offset = divmod(int(params["start_step"]) * global_batch, n)
    seed = int(params["seed"])
    order = tf.data.Dataset.range(epoch, _FOREVER).flat_map(
        lambda e: tf.data.Dataset.from_tensor_slices(epoch_order(n, seed, e))).skip(offset)
    mine = order.batch(global_batch, drop_remainder=True).map(
        lambda ids: ids[host * per_host:(host + 1) * per_host])
    indices = mine.unbatch().batch(per_replica, drop_remainder=True)
    tensors = tf.nest.map_structure(tf.convert_to_tensor, examples)
    return indices.map(lambda ids: tf.nest.map_structure(lambda t: tf.gather(t, ids), tensors),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
                       ).prefetch(tf.data.AUTOTUNE)


def eval_batches(examples: Any, params: dict, context: tf.distribute.InputContext) -> tf.data.Dataset:
    """Every example once, in order, as ``(features, labels, weights)`` per-replica batches:
    ``examples`` is ``(features, labels)`` (to predict examples without labels, give any labels,
    such as zeros: the predict split ignores them); the last global batch is padded with copies
    of example 0 of weight 0, and this host yields its part of each global batch."""
    if not isinstance(examples, tuple) or len(examples) != 2:
        raise ValueError("eval_batches takes (features, labels)")
    n = _count(examples)
    global_batch, per_host, per_replica = _sizes(params, context)
    host = context.input_pipeline_id
    padded = -(-n // global_batch) * global_batch
    ids = np.concatenate([np.arange(n), np.zeros(padded - n, np.int64)]).astype(np.int64)
    weights = np.concatenate([np.ones(n, np.float32), np.zeros(padded - n, np.float32)])
    ids = ids.reshape(-1, global_batch)[:, host * per_host:(host + 1) * per_host].reshape(-1)
    weights = weights.reshape(-1, global_batch)[:, host * per_host:(host + 1) * per_host].reshape(-1)
    tensors = tf.nest.map_structure(tf.convert_to_tensor, examples)

    def rows(i, w):
        return (*tf.nest.map_structure(lambda t: tf.gather(t, i), tensors), w)

    return (tf.data.Dataset.from_tensor_slices((ids, weights))
            .batch(per_replica, drop_remainder=True)
            .map(rows, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .prefetch(tf.data.AUTOTUNE))
