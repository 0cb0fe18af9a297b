"""The backend primitives on TensorFlow (see :mod:`jobs.backend_ops`).

Dropout is stateless: a model called with ``seed`` (int64 ``[key0, key1, first_example]``: the
runner derives the key from the spec's seed and the step, and ``first_example`` is where this
replica's batch starts in the global batch) folds in a fixed number per dropout site. Each
site's mask is a slice of one Philox stream over the whole global batch, read from this
replica's offset: the masks of step N are the same whether or not the run was interrupted
before it, and whether the global batch is split over 1 replica, 8 TPU cores or 4 hosts.
"""

from __future__ import annotations

import tensorflow as tf

PHILOX = 1  # tf.random.Algorithm.PHILOX: a counter-based stream that can be entered anywhere


def fold(seed, salt: int):
    """The seed of one dropout site under ``seed`` (None stays None): the key folds ``salt``
    in, the first example stays."""
    if seed is None:
        return None
    seed = tf.convert_to_tensor(seed, tf.int64)
    key = tf.cast(tf.random.experimental.stateless_fold_in(seed[:2], salt), tf.int64)
    return tf.concat([key, seed[2:]], 0)


def uniform_like(x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Uniform [0, 1) floats shaped like ``x``: the part of a Philox stream over the whole global
    batch (key ``seed[0]``, stream ``seed[1]``) that belongs to the examples of ``x``, which start
    at global example ``seed[2]`` (0 when ``seed`` has two elements). Philox yields 4 floats per
    counter step, so the slice starts at counter ``offset // 4`` and drops ``offset % 4``."""
    seed = tf.convert_to_tensor(seed, tf.int64)
    first = seed[2] if seed.shape[0] == 3 else tf.constant(0, tf.int64)
    shape = tf.shape(x, out_type=tf.int64)
    n = tf.reduce_prod(shape)
    offset = first * (n // tf.maximum(shape[0], 1))
    skip = offset % 4
    key = tf.bitcast(seed[:1], tf.uint64)
    counter = tf.bitcast(tf.stack([offset // 4, seed[1]]), tf.uint64)
    flat = tf.raw_ops.StatelessRandomUniformV2(shape=tf.reshape(n + skip, [1]), key=key,
                                               counter=counter, alg=PHILOX, dtype=tf.float32)
    return tf.reshape(flat[skip:skip + n], shape)


def unseeded_dropout(x: tf.Tensor, rate: float) -> tf.Tensor:
    return tf.nn.dropout(x, rate=rate)


def matmul_t(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    return tf.matmul(a, b, transpose_b=True)


def sparse_cross_entropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
