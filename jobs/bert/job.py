"""What the three BERT jobs share on top of the public job API: variables under their original
TF1 names, AdamW as google-research/bert's optimization.py, and ``init_checkpoint`` loading.

The runner knows none of this: it asks a job for its named variables, its optimizer and its
initialization (:class:`jobs.job.Job`), and a BERT job answers with the original names (so a
checkpoint loads on any Keras version and into ``init_checkpoint`` of another job), the original
AdamW over the variables its loss reaches, and the weights of an original checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from ..job import Job, JobContext, log, unwrap
from ..optimization import AdamWeightDecay, StatelessAdamW
from . import weights
from .spec import BertSpec


class BertJob(Job):
    """A job on a BERT model whose layers list their ``original_variables()``."""

    spec: BertSpec

    def named_variables(self, model) -> dict[str, tf.Variable]:
        return {name: unwrap(v) for name, v in model.original_variables().items()}

    def trainable(self, name: str) -> bool:
        """Whether the optimizer updates the variable of this original name (False for those
        the loss does not reach, such as the pooler under a span head: the original's
        optimizer skips variables without a gradient)."""
        return True

    def build_optimizer(self, ctx: JobContext) -> AdamWeightDecay | StatelessAdamW:
        """The original AdamW over the variables the loss reaches: on TensorFlow a module with
        its moments, on JAX the same arithmetic with no state (the runner keeps it)."""
        s = self.spec
        trained = {n: v for n, v in ctx.variables.items() if self.trainable(n)}
        if ctx.backend == "jax":
            return StatelessAdamW(trained, init_lr=s.learning_rate,
                                  num_train_steps=s.num_train_steps,
                                  num_warmup_steps=s.warmup_steps,
                                  weight_decay_rate=s.weight_decay_rate)
        return AdamWeightDecay(trained, init_lr=s.learning_rate, num_train_steps=s.num_train_steps,
                               num_warmup_steps=s.warmup_steps,
                               weight_decay_rate=s.weight_decay_rate,
                               jit_compile=ctx.xla and ctx.replicas > 1)

    def init_variables(self, variables: dict) -> tuple[dict, Callable[[str], bool]]:
        """Which variables ``init_checkpoint`` fills, and which of them it must contain."""
        return variables, lambda name: True

    def initialize(self, ctx: JobContext) -> None:
        """Load ``init_checkpoint`` (an original release, a pretraining run's export, a
        fine-tuned model_dir) into the variables :meth:`init_variables` names."""
        prefix = self.spec.resolved_init_checkpoint
        if not prefix:
            log("no checkpoint to resume and no init_checkpoint: training from scratch")
            return
        prefix = weights.checkpoint_prefix(prefix)
        subset, required = self.init_variables(dict(ctx.variables))
        loaded = weights.restore(subset, prefix, required=required)
        left = sorted(set(ctx.variables) - set(loaded))
        log(f"initialized {len(loaded)} variables from {prefix}"
            + (f"; {len(left)} start fresh ({', '.join(left[:3])}{'...' if len(left) > 3 else ''})"
               if left else ""))
