"""FLOPs per training step: what a job costs in arithmetic, before any TPU is rented. Pure.

The BERT jobs' compute follows from their config, sequence length and batch: the usual 6 FLOPs
per parameter and token (forward 2, backward 4) over every parameter, embeddings included, plus
attention's score and context products (6 x 2 x s^2 x hidden per layer)
(:meth:`jobs.bert.config.BertConfig.train_flops_per_sequence`: BERT-Base at 128 tokens is 85.9
GFLOP per sequence). The heads (a classifier, SQuAD's span head, the masked-LM transform on 20
positions) add well under 1 %, and are left out. A job of the user's own (``job: keras``) has no
config tpuctl can read: its FLOPs per step are the user's to give (``--flops-per-step``), or its
rate is measured on the accelerator type by a run of it (the ledger, :mod:`.history`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BERT_JOBS = ("bert-pretrain", "bert-finetune", "bert-squad")
# spec keys that decide how much one step computes (the rest: paths, schedule, seed, ...)
_COMPUTE_KEYS = ("job", "train_batch_size", "max_seq_length", "max_predictions_per_seq", "module", "params",
                 "precision")


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one optimizer step over the global batch, and how that figure was reached."""

    flops: float | None
    basis: str

    @property
    def known(self) -> bool:
        return self.flops is not None and self.flops > 0


def bert_step(config: Mapping[str, Any], *, seq_length: int, batch: int) -> StepFlops:
    """A BERT job's step from its ``bert_config.json`` (a mapping), sequence length and global batch."""
    from jobs.bert.config import BertConfig

    bert = BertConfig.from_dict(dict(config))
    per_seq = bert.train_flops_per_sequence(seq_length)
    params = bert.num_parameters()
    basis = (f"(6 x {params:,} parameters x {seq_length} tokens + attention 12 x {seq_length}^2 x "
             f"{bert.hidden_size} x {bert.num_hidden_layers} layers = {per_seq / 1e9:.4g} GFLOP per sequence) "
             f"x batch {batch}")
    return StepFlops(per_seq * batch, basis)


def given(flops_per_step: float) -> StepFlops:
    return StepFlops(float(flops_per_step), f"{flops_per_step:.3g} FLOPs per step, as given (--flops-per-step)")


def unknown(job: str) -> StepFlops:
    return StepFlops(None, f"job: {job} has no model tpuctl can count")


def workload_key(spec: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> str:
    """What makes two runs the same work per step (the job, its batch, sequence length, user module
    and params, and the BERT config): runs of the same key on the same accelerator type measure
    the same rate, whatever their paths, steps or seeds."""
    picked = {k: spec.get(k) for k in _COMPUTE_KEYS if spec.get(k) is not None}
    if isinstance(picked.get("module"), str):       # a module file is the same work wherever it was read
        picked["module"] = picked["module"].replace("\\", "/").rsplit("/", 1)[-1]
    if config:
        picked["bert_config"] = {k: v for k, v in sorted(config.items()) if not k.endswith("_prob")}
    text = json.dumps(picked, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
