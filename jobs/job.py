"""The public job API: what a job provides to the runner (the model_fn / input_fn split of
TPUEstimator), and the small context the runner hands to its hooks.

This module sits below both the runner and the jobs: :mod:`jobs.runner.runner` drives any :class:`Job`,
the BERT jobs subclass :class:`jobs.bert.job.BertJob` (a :class:`Job`), ``job: keras`` adapts a
user's plain functions (:mod:`jobs.keras.job`), and :mod:`jobs.runner.registry` (above all of them)
picks the job for a spec. Jobs import this module, :mod:`jobs.data`, :mod:`jobs.errors`,
:mod:`jobs.optimization` and :mod:`jobs.spec`, never the runner's modules (checkpoints,
strategies, signals, progress): an import-linter contract in pyproject.toml says so.

Where each hook runs, as tensorflow/models' ``Task`` says it: ``prepare``, ``initialize``,
``eval_metrics`` and ``finish`` on the host, in Python; ``build_model`` and
``build_optimizer`` on the host inside ``strategy.scope()``; ``dataset`` on the host, once per
input pipeline; ``loss_counts`` and ``loss`` on the device, traced into the train step.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .spec.base import RunSpec

if TYPE_CHECKING:
    import tensorflow as tf


def log(message: str) -> None:
    print(f"jobs: {message}", file=sys.stderr, flush=True)


def unwrap(variable) -> tf.Variable:
    """The tf.Variable (or distributed variable) under a Keras 3 variable on TensorFlow; on JAX
    the Keras variable itself (its value is an immutable array: the runner traces with values,
    and reads and assigns the variable between steps)."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return variable
    import tensorflow as tf

    if isinstance(variable, tf.Variable):
        return variable
    inner = getattr(variable, "value", None)
    if isinstance(inner, tf.Variable):
        return inner
    return variable._value  # Keras 3 keeps the backend variable here


class Optimizer(Protocol):
    """What the runner needs of an optimizer made by :meth:`Job.build_optimizer` (in the
    strategy's scope): a step counter, its state for the checkpoint, and an update applied in
    replica context to each replica's gradient of its share of the global mean loss."""

    names: Sequence[str]          # the trained variables, in the order of the gradients
    step: tf.Variable             # int64 optimizer steps taken (the checkpoint's global_step)

    def slots(self) -> dict[str, tf.Variable]:
        """The optimizer's state by name, for the checkpoint (exact resumption)."""

    def apply_gradients(self, grads: Sequence[tf.Tensor]) -> Any:
        """Sum the replicas' gradients, update the variables and the step. Replica context."""

    def current_learning_rate(self) -> tf.Tensor:
        """The learning rate of the next step (for the summaries)."""


class StatelessOptimizer(Protocol):
    """What the JAX backend's runner needs of an optimizer made by :meth:`Job.build_optimizer`
    when ``ctx.backend == "jax"``: an update with no state of its own, traced into the one
    ``jax.jit`` of the train step over the global batch. The runner keeps the values, the slots
    and the step, and checkpoints the slots under the names ``slot_values`` gives them (the same
    names as the TensorFlow optimizer's ``slots``, so a checkpoint continues on either
    backend)."""

    names: Sequence[str]          # the trained variables, in the order of the gradients

    def slot_values(self) -> dict[str, Any]:
        """The optimizer's initial state by checkpoint name (arrays)."""

    def stateless_apply(self, values: Sequence[Any], slots: dict[str, Any], grads: Sequence[Any],
                        step: Any) -> tuple[list[Any], dict[str, Any]]:
        """New values and slots after the step numbered ``step`` (counting from 0), from the
        gradient of the global mean loss. Traced: keras.ops only."""

    def learning_rate(self, step: Any) -> Any:
        """The learning rate of the step numbered ``step``."""


@dataclass
class JobContext:
    """What a job's hooks may use of the run: where to write, the strategy, the model once
    built, and the runner's compiled loops for evaluation and prediction. Made by the runner;
    ``model``, ``variables`` and ``optimizer`` are set once :meth:`Job.build_model` and
    :meth:`Job.build_optimizer` have run."""

    spec: RunSpec
    model_dir: str
    out_dir: str          # model_dir on the chief; a scratch directory on the other workers
    chief: bool           # the worker that writes model_dir (checkpoints, progress, exports)
    hosts: int            # input pipelines (the slice's hosts)
    host: int             # this process's index among them
    strategy: tf.distribute.Strategy | None   # None on JAX (jax.jit over a device mesh)
    replicas: int         # replicas in sync (devices in the mesh on JAX)
    xla: bool             # the step is jit-compiled (GPUs; TPUs compile everything anyway)
    fitted_batch: Callable[[int], int]
    evaluate_sums: Callable[..., dict[str, float]]
    predict_rows: Callable[..., list]
    making_data: Callable[[], AbstractContextManager]
    # "tensorflow" or "jax" (Keras 3's backend of this process: the spec's ``backend``)
    backend: str = "tensorflow"
    # this host's tf.distribute.InputContext for ``dataset``: per replica on TensorFlow; on JAX
    # per host (one jit over the global batch takes each host's share of it)
    input_context: Callable[[], Any] | None = None
    # the optimizer steps taken, as the runner counts them (set by the runner)
    current_step: Callable[[], int] | None = None
    model: Any = None
    variables: Mapping[str, tf.Variable] = field(default_factory=dict)
    optimizer: Optimizer | None = None

    @property
    def step(self) -> int:
        """The optimizer steps taken so far."""
        if self.current_step is not None:
            return self.current_step()
        return int(self.optimizer.step.numpy()) if self.optimizer is not None else 0


class Job:
    """What a job provides. Subclasses override the methods below; the runner calls them with
    a :class:`JobContext` (never itself), so a job depends on this API only."""

    metric_names: tuple[str, ...] = ()
    # the training data's epoch stream (a jobs.data.EpochStream), made by ``prepare``; None
    # before, and when the spec does not train
    stream: Any = None

    def __init__(self, spec: RunSpec):
        self.spec = spec
        # files and directories ``finish`` wrote for the user, relative to model_dir
        # (progress.json's ``outputs``: what ``tpuctl status`` names)
        self.outputs: list[str] = []

    def batch_sizes(self) -> dict[str, int]:
        """Global batch sizes that must divide by the replica count, by spec key (evaluation
        and prediction batches need not: jobs pad them, see :attr:`JobContext.fitted_batch`)."""
        return {"train_batch_size": self.spec.train_batch_size}

    def prepare(self, ctx: JobContext) -> None:
        """Read or create the data (before the model exists); raise ConfigError for bad input.
        Host."""

    def train_examples(self) -> int | None:
        """How many examples one epoch of the training data holds, once ``prepare`` ran (None:
        unknown, or nothing to train on): the epoch stream's record count. The runner warns when
        the spec's steps would read them too many times (:mod:`jobs.runner.epochs`); a job that feeds
        ``dataset`` another way returns its own count."""
        return self.stream.index.total if self.stream is not None else None

    def build_model(self):
        """The Keras model. Host, inside ``strategy.scope()``."""
        raise NotImplementedError

    def named_variables(self, model) -> dict[str, tf.Variable]:
        """Every variable of ``model`` under a stable name: the checkpoint's keys."""
        raise NotImplementedError

    def build_optimizer(self, ctx: JobContext) -> Optimizer:
        """The optimizer over ``ctx.variables``. Host, inside ``strategy.scope()``."""
        raise NotImplementedError

    def initialize(self, ctx: JobContext) -> None:
        """A run with no checkpoint to resume: fill the variables that start from elsewhere
        (a pretrained checkpoint), or leave them as built. Host."""

    def dataset(self, ctx: tf.distribute.InputContext, position: int) -> tf.data.Dataset:
        """This input pipeline's per-replica batches, forever, starting at ``position`` (examples
        of the epoch stream consumed so far, from the checkpoint). Global batch N must be a
        function of (data, seed, N) alone: see :mod:`jobs.data`. Host."""
        raise NotImplementedError

    def loss_counts(self, features) -> dict[str, tf.Tensor]:
        """The denominators of the loss's means over this replica's batch (float32 scalars
        from the input alone): by default its number of examples. The runner sums them over
        the global batch (:func:`jobs.runner.runner.loss_totals`) and passes them to :meth:`loss`.
        Device."""
        import keras

        first = next(iter(features.values()))
        return {"examples": keras.ops.cast(keras.ops.shape(first)[0], "float32")}

    def loss(self, model, features, training: bool, seed: tf.Tensor | None = None,
             totals: dict[str, tf.Tensor] | None = None) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """This replica's share of the mean loss over the global batch (sums over its examples
        divided by ``totals``, the global sums of :meth:`loss_counts`; None: this batch's own),
        and its shares of the scalar metrics named in ``metric_names``: summed over replicas
        they are the global means. ``seed`` (``[key0, key1, first_example]``) keys the dropout
        masks of this step and replica (:func:`jobs.runner.runner.dropout_seed`). Device."""
        raise NotImplementedError

    def eval_metrics(self, ctx: JobContext) -> dict[str, float]:
        """One evaluation of the model as it is now: the metrics ``spec.reported_metrics()``
        names, or {} when there is nothing to evaluate. The runner calls it every
        ``eval_every_steps`` during training, so it must leave the training input and anything
        a checkpoint holds untouched (exact resumption). Host."""
        return {}

    def finish(self, ctx: JobContext) -> dict[str, float]:
        """After the last step: evaluate, export. Returns metrics for progress.json; those
        ``spec.reported_metrics()`` names are the run's final evaluation. Host."""
        return {}
