"""The runner on Keras 3's JAX backend (``backend: jax``): :mod:`jobs.runner.jax.runner`."""
