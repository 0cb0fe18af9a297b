"""``job: keras``: your own Keras model on the runner, from a module of plain functions.

- :mod:`jobs.keras.inputs`: helpers for your ``dataset(params, split, context)`` that keep the
  runner's contracts (exact resumption, each host's part of the global batch, padded
  evaluation batches); the public API for user code, with :mod:`jobs.errors`.
- :mod:`jobs.keras.user`: importing your module and calling its functions, a mistake being one
  line naming your file and line.
- :mod:`jobs.keras.job`: the adapter from your functions to the runner's job hooks.

docs/own-code.md describes the contract. This package's ``__init__`` imports nothing, so the
control plane may read :mod:`jobs.usercode` without TensorFlow.
"""
