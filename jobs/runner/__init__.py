"""The runner's internals: what drives a job on the accelerator, never what a job imports.

- :mod:`jobs.runner.runner`: the TPUEstimator-style loop (strategy, checkpoints, host loops,
  evaluation, preemption) around any :class:`jobs.job.Job`;
- :mod:`jobs.runner.registry`: pairs a spec's ``job`` with its class and runs it (above both the
  runner and the jobs; only ``python -m jobs run`` imports it);
- :mod:`jobs.runner.distribute` (strategies), :mod:`jobs.runner.checkpointing`,
  :mod:`jobs.runner.preemption` (signals), :mod:`jobs.runner.heartbeat` and
  :mod:`jobs.runner.progress` (progress.json), :mod:`jobs.runner.summaries` and
  :mod:`jobs.runner.hparams` (TensorBoard), :mod:`jobs.runner.epochs` (the data-reuse warning).

The BERT jobs and user code use the public job API (:mod:`jobs.job`, :mod:`jobs.data`,
:mod:`jobs.errors`, :mod:`jobs.optimization`, :mod:`jobs.spec`, :mod:`jobs.keras.inputs`), never
this package: an import-linter contract in pyproject.toml says so. This ``__init__`` imports
nothing, so :mod:`jobs.runner.progress` stays readable without TensorFlow.
"""
