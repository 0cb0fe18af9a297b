"""The JAX and PyTorch examples need jax and torch, which the main venv (TensorFlow's) does not
hold: `make test-frameworks` runs them in .venv-frameworks (CPU jax and CPU torch from PyPI), and
the main venv does not collect them at all."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("jax") and importlib.util.find_spec("torch") \
    else ["test_framework_examples.py"]
