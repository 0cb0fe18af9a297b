"""What a job provides to the runner (the model_fn / input_fn split of TPUEstimator).

This module sits below both the runner and the jobs: :mod:`jobs.runner` drives any :class:`Job`,
the BERT jobs (:mod:`jobs.bert.pretrain`, :mod:`jobs.bert.classifier`) subclass it, and
:mod:`jobs.registry` (above both) picks the job for a spec. No module here imports one that
imports it back.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .spec import JobSpec

if TYPE_CHECKING:
    import tensorflow as tf


def log(message: str) -> None:
    print(f"jobs: {message}", file=sys.stderr, flush=True)


class Job:
    """What a job provides. Subclasses override the methods below; ``runner`` (a
    :class:`jobs.runner.Runner`) gives access to the strategy, the device and the spec."""

    metric_names: tuple[str, ...] = ()
    # the training data's epoch stream (a jobs.data.EpochStream), made by ``prepare``; None
    # before, and when the spec does not train
    stream: Any = None

    def __init__(self, spec: JobSpec):
        self.spec = spec
        # files and directories ``finish`` wrote for the user, relative to model_dir
        # (progress.json's ``outputs``: what ``tpuctl status`` names)
        self.outputs: list[str] = []

    def batch_sizes(self) -> dict[str, int]:
        """Global batch sizes that must divide by the replica count, by spec key (evaluation
        and prediction batches need not: jobs pad them, see ``Runner.fitted_batch``)."""
        return {"train_batch_size": self.spec.train_batch_size}

    def prepare(self, runner: Any) -> None:
        """Read or create the data (before the model exists); raise ConfigError for bad input."""

    def train_examples(self) -> int | None:
        """How many examples one epoch of the training data holds, once ``prepare`` ran (None:
        unknown, or nothing to train on): the epoch stream's record count. The runner warns when
        the spec's steps would read them too many times (:mod:`jobs.epochs`); a job that feeds
        ``dataset`` another way returns its own count."""
        return self.stream.index.total if self.stream is not None else None

    def build_model(self):
        """The Keras model, with ``original_variables()``; called inside ``strategy.scope()``."""
        raise NotImplementedError

    def dataset(self, ctx: tf.distribute.InputContext, position: int) -> tf.data.Dataset:
        """This input pipeline's per-replica batches, forever, starting at ``position`` (examples
        of the epoch stream consumed so far, from the checkpoint). Global batch N must be a
        function of (data, seed, N) alone: see :mod:`jobs.data`."""
        raise NotImplementedError

    def loss_counts(self, features) -> dict[str, tf.Tensor]:
        """The denominators of the loss's means over this replica's batch (float32 scalars
        from the input alone): by default its number of examples. The runner sums them over
        the global batch (:func:`jobs.runner.loss_totals`) and passes them to :meth:`loss`."""
        import tensorflow as tf

        first = next(iter(features.values()))
        return {"examples": tf.cast(tf.shape(first)[0], tf.float32)}

    def loss(self, model, features, training: bool, seed: tf.Tensor | None = None,
             totals: dict[str, tf.Tensor] | None = None) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """This replica's share of the mean loss over the global batch (sums over its examples
        divided by ``totals``, the global sums of :meth:`loss_counts`; None: this batch's own),
        and its shares of the scalar metrics named in ``metric_names``: summed over replicas
        they are the global means. ``seed`` (``[key0, key1, first_example]``) keys the dropout
        masks of this step and replica (:func:`jobs.runner.dropout_seed`)."""
        raise NotImplementedError

    def init_variables(self, variables: dict) -> tuple[dict, Callable[[str], bool]]:
        """Which variables ``init_checkpoint`` fills, and which of them it must contain."""
        return variables, lambda name: True

    def trainable(self, name: str) -> bool:
        """Whether the optimizer updates the variable of this original name (False for those
        the loss does not reach, such as the pooler under a span head: the original's
        optimizer skips variables without a gradient)."""
        return True

    def eval_metrics(self, runner: Any) -> dict[str, float]:
        """One evaluation of the model as it is now: the metrics ``spec.reported_metrics()``
        names, or {} when there is nothing to evaluate. The runner calls it every
        ``eval_every_steps`` during training, so it must leave the training input and anything
        a checkpoint holds untouched (exact resumption)."""
        return {}

    def finish(self, runner: Any) -> dict[str, float]:
        """After the last step: evaluate, export. Returns metrics for progress.json; those
        ``spec.reported_metrics()`` names are the run's final evaluation."""
        return {}
