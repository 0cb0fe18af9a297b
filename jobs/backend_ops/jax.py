"""The backend primitives on JAX (see :mod:`jobs.backend_ops`).

A dropout seed is a ``uint32[2]`` raw threefry key (``jax.random.key_data``), the step's key
made by :func:`step_seed` from the spec's seed and the step; each dropout site folds its own
number in (:func:`fold`), and its mask is ``jax.random.uniform`` over the whole shape of the
tensor it drops from. On JAX the train step is one ``jax.jit`` over the global batch (sharded
over the devices and hosts), so that shape is the global batch's: with
``jax_threefry_partitionable`` (set here) the random bits of each element are a function of the
key and the element's index in the global array, never of how the array is laid out over
devices. So the masks of step N are the same whether or not the run was interrupted before it,
and whether the global batch is split over 1 device, 8 TPU chips or 4 hosts (and XLA may
partition the draw: a device need not compute the other shards' bits).

These keys are not TensorFlow's Philox streams: a run keeps its masks only on the backend it
started on (a checkpoint continues on the other backend with other masks).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

IMPL = "threefry2x32"

# Sharding-invariant random bits (the default since JAX 0.5; set in case a process says otherwise).
jax.config.update("jax_threefry_partitionable", True)


def _key(seed):
    seed = jnp.asarray(seed)
    if seed.dtype != jnp.uint32:
        # int32 (a seed converted without x64) bit for bit; any other integer by value
        seed = (jax.lax.bitcast_convert_type(seed, jnp.uint32) if seed.dtype == jnp.int32
                else seed.astype(jnp.uint32))
    return jax.random.wrap_key_data(seed, impl=IMPL)


def step_seed(seed: int, step) -> jax.Array:
    """The dropout seed of ``step`` (an int or a traced integer) of a run with ``seed``:
    ``uint32[2]``, the key data of ``fold_in(PRNGKey(seed), step)``."""
    key = jax.random.key(int(seed), impl=IMPL)
    return jax.random.key_data(jax.random.fold_in(key, step))


def fold(seed, salt: int):
    """The seed of one dropout site under ``seed`` (None stays None)."""
    if seed is None:
        return None
    return jax.random.key_data(jax.random.fold_in(_key(seed), salt))


def uniform_like(x, seed) -> jax.Array:
    """Uniform [0, 1) float32 values over ``x``'s full shape (the global batch under ``jit``)."""
    return jax.random.uniform(_key(seed), jnp.shape(x), dtype=jnp.float32)


def unseeded_dropout(x, rate: float):
    import keras

    return keras.random.dropout(x, rate)


def matmul_t(a, b) -> jax.Array:
    return jnp.matmul(a, jnp.swapaxes(b, -1, -2))


def sparse_cross_entropy(labels, logits) -> jax.Array:
    """``-log softmax(logits)[label]``: the picked entry, no one-hot over the vocabulary."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    labels = jnp.asarray(labels).astype(jnp.int32)[..., None]
    return -jnp.take_along_axis(log_probs, labels, axis=-1)[..., 0]
