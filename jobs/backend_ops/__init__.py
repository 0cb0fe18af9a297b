"""The few primitives the BERT math needs that Keras 3's ``keras.ops`` cannot state the same way
on every backend: dropout's stateless randomness, and a product with a transposed operand.

Everything else in :mod:`jobs.bert.modeling` is ``keras.ops``; these functions dispatch on
``keras.backend.backend()`` (fixed per process by ``KERAS_BACKEND``) to
:mod:`jobs.backend_ops.tensorflow` or :mod:`jobs.backend_ops.jax`, imported on first use: a
process on the TensorFlow backend never imports JAX, nor one on JAX TensorFlow's random ops.

Dropout randomness (why each backend has its own): a run's masks must be a function of (seed,
step, global example) alone, so that step N draws the same masks whether the run was
interrupted before it or not, and however the global batch is split over replicas or hosts.

- TensorFlow: ``seed`` is int64 ``[key0, key1, first_example]``; each replica draws its slice
  of one Philox stream over the global batch (the runner passes where its batch starts).
- JAX: ``seed`` is a ``uint32[2]`` raw threefry key (``jax.random.key_data``); the train step
  is one ``jax.jit`` over the global batch, and ``jax_threefry_partitionable`` makes the bits
  of ``jax.random.uniform`` over the global shape the same on any sharding of that batch.

``fold(seed, salt)`` gives each dropout site its own seed (None stays None), and
``uniform_like(x, seed)`` uniform [0, 1) float32 values shaped like ``x``.

The other two keep TensorFlow's numbers bitwise what they were before the JAX backend (the
TensorFlow path runs the very ops it always ran), where the ``keras.ops`` spelling would select
other kernels: ``matmul_t`` (``a @ b^T``) and ``sparse_cross_entropy``.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType

SUPPORTED = ("tensorflow", "jax")


@cache
def _module(backend: str) -> ModuleType:
    if backend not in SUPPORTED:
        from ..errors import ConfigError

        raise ConfigError(f"Keras backend {backend!r} is not supported by the job side; set "
                          "KERAS_BACKEND (or the spec's backend:) to jax or tensorflow")
    return importlib.import_module(f"{__name__}.{backend}")


def backend() -> ModuleType:
    """The implementation for this process's Keras backend."""
    import keras

    return _module(keras.backend.backend())


def fold(seed, salt: int):
    """The seed of one dropout site under ``seed`` (None stays None)."""
    if seed is None:
        return None
    return backend().fold(seed, salt)


def uniform_like(x, seed):
    """Uniform [0, 1) float32 values shaped like ``x``, keyed by ``seed`` (see the module)."""
    return backend().uniform_like(x, seed)


def unseeded_dropout(x, rate: float):
    """Dropout without a seed (eager experiments, never a run's train step)."""
    return backend().unseeded_dropout(x, rate)


def matmul_t(a, b):
    """``a @ b^T`` over the last two axes (``b`` may have fewer leading axes than ``a``).

    keras.ops has no ``transpose_b``: on TensorFlow ``matmul(a, swapaxes(b))`` or ``einsum``
    select other kernels than ``tf.matmul(a, b, transpose_b=True)`` (measured: the SQuAD head's
    logits differ by 7.6e-6 and the attention scores' gradients in the last bit), so the
    TensorFlow path keeps the op it always ran and its numbers stay bitwise as they were."""
    return backend().matmul_t(a, b)


def sparse_cross_entropy(labels, logits):
    """Per-example softmax cross-entropy of integer ``labels`` [...] under ``logits`` [..., n].

    ``keras.ops.sparse_categorical_crossentropy`` on TensorFlow casts the labels to int64 before
    ``tf.nn.sparse_softmax_cross_entropy_with_logits``, and XLA then sums the masked-LM output
    bias's gradient in another order (measured: 3.7e-9, the last bit); the TensorFlow path keeps
    the original call with the labels as they come."""
    return backend().sparse_cross_entropy(labels, logits)
