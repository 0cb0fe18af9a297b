"""Job specs: a YAML file plus ``--set key=value`` overrides, checked before TensorFlow starts.

This module imports only the standard library and PyYAML, because the control plane
(``tpuctl job run``, the supervisor, ``tpuctl status``) reads specs on machines without
TensorFlow. Every problem is a :class:`SpecError` whose message is one line naming the fix, so a
typo costs a second on the laptop instead of a TPU start-up.

A spec is flat (``key: value``): the keys are those of the original google-research/bert flags
(``train_batch_size``, ``num_train_steps``, ``save_checkpoints_steps`` ...), so people who know
``run_pretraining.py`` and ``run_classifier.py`` recognise them. ``job`` picks the dataclass:

- ``bert-pretrain``: masked-LM + next-sentence pretraining (:class:`PretrainSpec`);
- ``bert-finetune``: sequence classification from TSV/CSV (:class:`FinetuneSpec`);
- ``bert-squad``: SQuAD span extraction (:class:`SquadSpec`);
- ``keras``: the user's own Keras model (:class:`KerasSpec`), whose ``params:`` mapping is the one
  key that nests (``--set params.NAME=VALUE`` sets an entry);
- ``command``: any program of the user's (:class:`CommandSpec`): its argv, where it runs, its
  requirements; none of the runner's keys.

The run keys every job has are :class:`RunSpec`'s; the BERT jobs add an original BERT directory
(:class:`BertSpec`).

Relative local paths are taken relative to the current directory, like the original flags.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import re
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

import yaml

from . import bounded_yaml
from .bert.vocab import MAX_VOCAB_BYTES
from .errors import ConfigError

PRECISIONS = ("auto", "float32", "bfloat16")
LOSS_NORMALIZATIONS = ("global", "replica")
MAX_INT = 1 << 53   # integers beyond this are typos (and floats cannot hold them exactly)


class SpecError(ConfigError):
    """A job spec that cannot run; ``str(exc)`` is one line that names the fix."""


def _required(doc: str, **kw: Any) -> Any:
    return field(default=None, metadata={"doc": doc, "required": True, **kw})


def _opt(default: Any, doc: str, **kw: Any) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc, **kw})
    return field(default=default, metadata={"doc": doc, **kw})


@dataclass
class RunSpec:
    """The run keys every job has (batches, steps, schedule, checkpoints, precision): what the
    runner and the control plane read, without TensorFlow and without a model of any kind."""

    job: str = _required("bert-pretrain, bert-finetune, bert-squad, keras or command")
    model_dir: str = _required("where checkpoints, progress.json and TensorBoard summaries go "
                               "(gs://bucket/path or a local directory)")
    train_batch_size: int = _opt(32, "global batch size: must divide by the replica count "
                                     "(8 on a v2-8 or v3-8)")
    num_train_steps: int = _opt(100000, "total optimizer steps; the run ends here")
    learning_rate: float = _opt(1e-4, "peak learning rate of AdamW")
    warmup_proportion: float = _opt(0.1, "fraction of num_train_steps with linear warm-up")
    num_warmup_steps: int | None = _opt(None, "warm-up steps; overrides warmup_proportion")
    weight_decay_rate: float = _opt(0.01, "AdamW decoupled weight decay (not on LayerNorm, bias)")
    save_checkpoints_steps: int = _opt(1000, "checkpoint every this many steps")
    keep_checkpoint_max: int = _opt(5, "checkpoints kept in model_dir (at least 2)")
    steps_per_execution: int = _opt(1000, "steps per host call (TPUEstimator's iterations_per_loop)")
    precision: str = _opt("auto", "auto (bfloat16 on TPUs and bf16-capable GPUs), float32 or bfloat16")
    seed: int = _opt(12345, "seed for initialisation, shuffling and dropout")
    loss_normalization: str = _opt(
        "global", "global: every loss and metric is a mean over the global batch, so a spec "
                  "trains the same model on any number of replicas or hosts; replica: each "
                  "replica's own mean, averaged (the original per-TPU-core normalisation)")
    eval_every_steps: int = _opt(0, "evaluate every this many steps during training, into "
                                    "progress.json's evals (for sweeps' pruners); 0: only at the end")
    hparams: list[str] | None = _opt(  # noqa: RUF009 - _opt returns a dataclasses.field
        None, "spec keys recorded as TensorBoard HParams of this run (comma-separated), e.g. "
              "learning_rate,train_batch_size")
    budget_usd: float | None = _opt(None, "hard cap in US dollars at list price: the run stops on a "
                                          "checkpoint and its TPU is deleted before it would pass it "
                                          "(tpuctl train --budget-usd)")
    deadline: str | None = _opt(None, "hard deadline, ISO 8601 such as 2026-12-01T08:00 (local time "
                                      "unless it names an offset): the run stops on a checkpoint once "
                                      "it cannot finish by then (tpuctl train --deadline)")

    # What each evaluation reports (progress.json's evals, eval/ scalars): what a sweep's
    # ``metric`` may name, checked by the control plane before anything is created.
    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ()

    # -- derived values the control plane may want too ---------------------------------------
    @property
    def warmup_steps(self) -> int:
        if self.num_warmup_steps is not None:
            return self.num_warmup_steps
        return int(self.num_train_steps * self.warmup_proportion)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reported_metrics(self) -> tuple[str, ...]:
        """The metrics every evaluation of this spec reports; () when it has nothing to
        evaluate (a fine-tuning spec without dev_file)."""
        return self.REPORTED_METRICS

    def hparam_names(self) -> list[str]:
        """What ``hparams`` may name: the spec's keys (but ``hparams`` itself)."""
        return sorted(f.name for f in dataclasses.fields(self) if f.name != "hparams")

    def hparam_value(self, key: str) -> Any:
        return getattr(self, key)

    def hparam_values(self) -> dict[str, Any]:
        """The ``hparams`` keys and their values, as TensorBoard HParams take them (bool,
        number or string; lists comma-joined, null as the string "null")."""
        out: dict[str, Any] = {}
        for key in self.hparams or ():
            value = self.hparam_value(key)
            if isinstance(value, list):
                value = ",".join(map(str, value))
            out[key] = "null" if value is None else value
        return out

    def check_code(self, search: Sequence[str]) -> None:
        """Check the user's code the spec names, without running it (a job of the user's;
        the built-in jobs have none). ``search``: the directories it may be in."""

    def _check(self) -> None:
        _positive(self, "save_checkpoints_steps", "train_batch_size", "steps_per_execution")
        if getattr(self, "do_train", True):
            _positive(self, "num_train_steps")
        if self.eval_every_steps < 0:
            raise SpecError(f"eval_every_steps is {self.eval_every_steps}; use 0 (evaluate at the "
                            "end only) or a positive number of steps, e.g. --set eval_every_steps=1000")
        known = self.hparam_names()
        for key in self.hparams or ():
            if key not in known:
                close = _suggest(key, dict.fromkeys(known))
                hint = f"{close} " if close.startswith("did you") else ""
                raise SpecError(f"hparams names {_show(key)}, not a key of {self.job}; {hint}valid "
                                f"keys: {', '.join(known)}")
        if self.budget_usd is not None and not self.budget_usd > 0:
            raise SpecError(f"budget_usd is {self.budget_usd:g}; give a positive amount in US dollars, "
                            "e.g. --set budget_usd=50 (or leave it null: no cap)")
        if self.deadline is not None:
            parse_deadline(self.deadline)
        if self.keep_checkpoint_max < 2:
            raise SpecError(f"keep_checkpoint_max is {self.keep_checkpoint_max}; keep at least 2 so "
                            "a checkpoint cut by a preemption can fall back to the one before "
                            "(--set keep_checkpoint_max=2)")
        if not self.learning_rate > 0:
            raise SpecError(f"learning_rate is {self.learning_rate}; use a positive value such "
                            "as --set learning_rate=5e-5")
        if not 0.0 <= self.warmup_proportion <= 1.0:
            raise SpecError(f"warmup_proportion is {self.warmup_proportion}; use a fraction "
                            "between 0 and 1 (--set warmup_proportion=0.1)")
        if self.num_warmup_steps is not None and self.num_warmup_steps < 0:
            raise SpecError("num_warmup_steps must be >= 0")
        if self.weight_decay_rate < 0:
            raise SpecError("weight_decay_rate must be >= 0 (--set weight_decay_rate=0.01)")
        if self.loss_normalization not in LOSS_NORMALIZATIONS:
            raise SpecError(f"loss_normalization {_show(self.loss_normalization)} is not one of "
                            f"{', '.join(LOSS_NORMALIZATIONS)}; use --set loss_normalization=global")
        if self.precision not in PRECISIONS:
            raise SpecError(f"precision {_show(self.precision)} is not one of {', '.join(PRECISIONS)}; "
                            "use --set precision=auto")


def parse_deadline(text: Any) -> float:
    """A deadline as people write it (ISO 8601: ``2026-12-01T08:00``, ``2026-12-01 08:00:00+00:00``,
    ``...Z``; local time without an offset) as unix seconds. Raises :class:`SpecError`."""
    from datetime import datetime

    raw = str(text).strip()
    try:
        when = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise SpecError(f"deadline {_show(raw)} is not a date and time; write it as ISO 8601, e.g. "
                        "2026-12-01T08:00 (local time) or 2026-12-01T08:00+00:00") from None
    return when.timestamp() if when.tzinfo else when.astimezone().timestamp()


@dataclass
class BertSpec(RunSpec):
    """The run keys plus an original BERT directory: what every built-in BERT job has."""

    bert_dir: str = _required("an original google-research BERT directory: bert_config.json, "
                              "vocab.txt and usually bert_model.ckpt.*", path="bert_dir")
    init_checkpoint: str | None = _opt(
        None, "checkpoint to start from when model_dir has none to resume (a prefix, or a "
              "directory: its newest checkpoint); default <bert_dir>/bert_model.ckpt if present; "
              "'none' trains from scratch", path="checkpoint")
    do_lower_case: bool = _opt(True, "lower-case and strip accents (uncased and Chinese models)")
    max_seq_length: int = _opt(128, "tokens per sequence, [CLS] and [SEP] included")

    @property
    def resolved_init_checkpoint(self) -> str | None:
        """``init_checkpoint`` with its default applied (``None``: train from scratch)."""
        value = self.init_checkpoint
        if value is None:
            default = _join(self.bert_dir, "bert_model.ckpt")
            if _is_remote(default) or os.path.exists(default + ".index"):
                return default
            return None
        if value.lower() == "none":
            return None
        return value

    def _check(self) -> None:
        _positive(self, "max_seq_length")
        super()._check()
        if self.max_seq_length < 8:
            raise SpecError("max_seq_length must be at least 8 (--set max_seq_length=128)")
        _check_bert_dir(self)
        init = self.resolved_init_checkpoint
        if self.init_checkpoint and init and not _is_remote(init) and not _local_checkpoint(init):
            raise SpecError(f"init_checkpoint {init} not found ({init}.index is missing); pass the "
                            "checkpoint prefix, e.g. --set init_checkpoint=DIR/bert_model.ckpt, "
                            "a run's model_dir, or 'none' to train from scratch")


@dataclass
class PretrainSpec(BertSpec):
    """``bert-pretrain``: the original run_pretraining.py, plus optional data creation."""

    input_files: str | None = _opt(None, "TFRecord shards from create_pretraining_data "
                                         "(comma-separated globs); or give corpus_files",
                                   path="glob")
    corpus_files: str | None = _opt(None, "plain-text corpus (one sentence per line, blank line "
                                          "between documents; comma-separated globs): the job "
                                          "writes TFRecord shards into <model_dir>/pretraining_data "
                                          "first", path="glob")
    max_predictions_per_seq: int = _opt(20, "masked positions per sequence")
    masked_lm_prob: float = _opt(0.15, "data creation: fraction of tokens masked")
    dupe_factor: int = _opt(10, "data creation: passes over the corpus with different masks")
    short_seq_prob: float = _opt(0.1, "data creation: fraction of shorter sequences")
    do_whole_word_mask: bool = _opt(False, "data creation: mask all word pieces of a word together")
    num_shards: int = _opt(4, "data creation: TFRecord shards written")
    export_bert_dir: bool = _opt(True, "at the end write <model_dir>/export: bert_config.json, "
                                       "vocab.txt and bert_model.ckpt in the original variable names")
    eval_batch_size: int = _opt(8, "global batch size for evaluation")
    max_eval_steps: int = _opt(100, "evaluation batches: as run_pretraining.py's do_eval, the "
                                    "first max_eval_steps x eval_batch_size examples of the data, "
                                    "in file order")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = (
        "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "next_sentence_loss")

    def _check(self) -> None:
        super()._check()
        _positive(self, "eval_batch_size", "max_eval_steps")
        if bool(self.input_files) == bool(self.corpus_files):
            raise SpecError("give exactly one of input_files (TFRecord shards) and corpus_files "
                            "(plain text), e.g. --set input_files='gs://bucket/data/*.tfrecord'")
        _positive(self, "max_predictions_per_seq", "dupe_factor", "num_shards")
        if self.max_predictions_per_seq > self.max_seq_length:
            raise SpecError(f"max_predictions_per_seq {self.max_predictions_per_seq} exceeds "
                            f"max_seq_length {self.max_seq_length}; use about "
                            "max_seq_length * masked_lm_prob (20 for 128)")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise SpecError("masked_lm_prob must be between 0 and 1 (--set masked_lm_prob=0.15)")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise SpecError("short_seq_prob must be between 0 and 1 (--set short_seq_prob=0.1)")
        for key in ("input_files", "corpus_files"):
            _check_globs(self, key)


@dataclass
class TaskSpec(BertSpec):
    """Keys of the fine-tuning jobs, which can also predict without training."""

    do_train: bool = _opt(True, "false: predict only (no training): load init_checkpoint, a "
                                "fine-tuned run's model_dir or checkpoint, predict the test/"
                                "predict file and export saved_model/")

    def _check_predict_only(self, predict_key: str) -> None:
        """A predict-only run trains 0 steps and needs a file to predict and a fine-tuned
        checkpoint (the classifier or span head is checked when the job starts)."""
        if self.do_train:
            return
        self.num_train_steps = 0
        if not getattr(self, predict_key):
            raise SpecError(f"do_train is false but there is no {predict_key}; give the file to "
                            f"predict (--set {predict_key}=PATH) or train (--set do_train=true)")
        if self.resolved_init_checkpoint is None:
            raise SpecError("do_train is false, so init_checkpoint must name a fine-tuned "
                            "checkpoint: a bert-finetune or bert-squad run's model_dir "
                            "(--set init_checkpoint=DIR)")


@dataclass
class FinetuneSpec(TaskSpec):
    """``bert-finetune``: the original run_classifier.py for one TSV/CSV task."""

    learning_rate: float = _opt(5e-5, "peak learning rate of AdamW")
    num_train_steps: int = _opt(1000, "total optimizer steps (epochs x examples / batch)")
    train_file: str = _required("training examples: .tsv or .csv with columns text[, text_b], "
                                "label (a header row naming them is optional); not needed "
                                "when do_train is false", path="file", training=True)
    dev_file: str | None = _opt(None, "evaluation examples, same format; accuracy is reported "
                                      "when the run ends", path="file")
    labels: list[str] | None = _opt(  # noqa: RUF009 - _opt returns a dataclasses.field
        None, "label values in order (comma-separated); default: the sorted distinct labels "
              "of train_file")
    eval_batch_size: int = _opt(8, "global batch size for evaluation")
    test_file: str | None = _opt(None, "examples to label after training, same columns as "
                                       "train_file with or without the label: "
                                       "<model_dir>/test_results.tsv (one row of label "
                                       "probabilities per line, in order) and predictions.jsonl",
                                 path="file")
    predict_batch_size: int = _opt(8, "global batch size for predicting test_file")
    classifier_dropout: float = _opt(0.1, "dropout on the pooled output, as run_classifier.py")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ("eval_accuracy", "eval_loss")

    def reported_metrics(self) -> tuple[str, ...]:
        return self.REPORTED_METRICS if self.dev_file else ()

    def _check(self) -> None:
        if self.num_train_steps == 0:  # as run_classifier.py without do_train
            self.do_train = False
        self._check_predict_only("test_file")
        super()._check()
        _positive(self, "eval_batch_size", "predict_batch_size")
        for key in ("train_file", "dev_file", "test_file"):
            value = getattr(self, key)
            if value and not _is_remote(value) and not os.path.isfile(value):
                raise SpecError(f"{key} {value} not found; pass an existing .tsv or .csv file "
                                f"(--set {key}=PATH)")
            if value and not value.lower().endswith((".tsv", ".csv", ".txt")):
                raise SpecError(f"{key} {value} is neither .tsv nor .csv; rename it or convert it "
                                "to tab- or comma-separated text, label in the last column")
        if self.labels is not None and len(set(self.labels)) < 2:
            raise SpecError("labels needs at least two distinct values, e.g. --set labels=neg,pos")
        if not 0.0 <= self.classifier_dropout < 1.0:
            raise SpecError("classifier_dropout must be in [0, 1)")


@dataclass
class SquadSpec(TaskSpec):
    """``bert-squad``: span-extraction fine-tuning on SQuAD v1.1/v2.0, as run_squad.py."""

    learning_rate: float = _opt(3e-5, "peak learning rate of AdamW")
    max_seq_length: int = _opt(384, "tokens per window: [CLS] question [SEP] context [SEP]")
    num_train_steps: int = _opt(0, "total optimizer steps; 0: num_train_epochs x training "
                                   "questions / train_batch_size (as run_squad.py)")
    num_train_epochs: float = _opt(2.0, "epochs over the training questions when "
                                        "num_train_steps is 0")
    train_file: str = _required("SQuAD JSON to train on (train-v1.1.json, train-v2.0.json); "
                                "not needed when do_train is false", path="file", training=True)
    predict_file: str | None = _opt(None, "SQuAD JSON to predict after training (dev-v1.1.json): "
                                          "predictions.json and eval_results.json (EM, F1)",
                                    path="file")
    version_2_with_negative: bool = _opt(False, "SQuAD v2.0: questions may have no answer")
    doc_stride: int = _opt(128, "tokens between the starts of consecutive context windows")
    max_query_length: int = _opt(64, "question tokens kept")
    n_best_size: int = _opt(20, "start and end candidates per window when decoding")
    max_answer_length: int = _opt(30, "longest answer, in sub-tokens")
    null_score_diff_threshold: float = _opt(0.0, "v2.0: predict no answer when the null score "
                                                 "exceeds the best span's by more than this")
    predict_batch_size: int = _opt(8, "global batch size for prediction")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ("exact_match", "f1")

    def reported_metrics(self) -> tuple[str, ...]:
        return self.REPORTED_METRICS if self.predict_file else ()

    def _check(self) -> None:
        from .bert import squad_check as squad  # pure Python: no TensorFlow

        self._check_predict_only("predict_file")
        if self.num_train_epochs is None or not self.num_train_epochs > 0:
            raise SpecError(f"num_train_epochs is {self.num_train_epochs}; use a positive number "
                            "such as --set num_train_epochs=2")
        _positive(self, "doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                  "predict_batch_size")
        for key in ("train_file", "predict_file"):
            value = getattr(self, key)
            if value and not _is_remote(value):
                try:
                    count = squad.check_file(value, key == "train_file",
                                             self.version_2_with_negative)
                except squad.SquadError as exc:
                    message = str(exc).replace(value, _show(value, quote=False, limit=200))
                    raise SpecError(f"{key}: {message}") from None
                if key == "train_file" and self.num_train_steps == 0 and self.do_train:
                    self.num_train_steps = max(1, int(count / self.train_batch_size
                                                      * self.num_train_epochs))
        if self.num_train_steps == 0 and self.do_train:
            raise SpecError("train_file is remote, so its size is unknown here; give "
                            "--set num_train_steps=N (epochs x questions / train_batch_size)")
        super()._check()
        if self.max_seq_length <= self.max_query_length + 3:
            raise SpecError(f"max_query_length {self.max_query_length} leaves no context in "
                            f"max_seq_length {self.max_seq_length}; lower it, e.g. --set "
                            f"max_query_length={max(1, self.max_seq_length // 6)}")


# Keys that name the user's code: relative to the workdir the run stages, not to the current
# directory, so the control plane leaves them as written (and the entries of a mapping such as
# params.NAME, which are the user's values, not the runner's paths). A framework release
# (tensorflow: 2.18.0) is no path either.
CODE_KEYS = ("module", "requirements", "tensorflow", "jax")

# What the runner adds to a ``job: keras`` spec's params before it calls the user's functions.
RUNNER_PARAMS = ("batch_size", "global_batch_size", "seed", "split", "start_step",
                 "learning_rate", "num_train_steps", "num_warmup_steps")


@dataclass
class KerasSpec(RunSpec):
    """``keras``: your own Keras model on the runner (docs/own-code.md): a module of yours
    defines ``model(params)``, ``dataset(params, split, context)`` and ``loss(labels,
    outputs)``; ``params`` is passed to them."""

    module: str = _required("your Python file (model.py) or module (mypkg.model) that defines "
                            "model(params), dataset(params, split, context) and loss(labels, "
                            "outputs): found in the workdir (tpuctl train --workdir DIR), or "
                            "beside the spec, in the current directory or on PYTHONPATH")
    params: dict[str, Any] = _opt(  # noqa: RUF009 - _opt returns a dataclasses.field
        {}, "your settings, passed to your functions with batch_size, seed, split ... added "
            "by the runner; --set params.NAME=VALUE changes one")
    learning_rate: float = _opt(1e-3, "peak learning rate of AdamW (unless your module defines "
                                      "optimizer(params))")
    num_train_steps: int = _opt(1000, "total optimizer steps; the run ends here")
    eval_batch_size: int = _opt(32, "global batch size of the eval split (padded to whole "
                                    "per-replica batches of the slice)")
    predict_batch_size: int = _opt(32, "global batch size of the predict split")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ("eval_loss",)

    def __post_init__(self) -> None:
        self._metrics: tuple[str, ...] = ()   # what the module's metrics() returns, once checked

    def reported_metrics(self) -> tuple[str, ...]:
        """``eval_loss`` and ``eval_<name>`` for each name the module's ``metrics`` returns
        (known once :meth:`check_code` has read it)."""
        return self.REPORTED_METRICS + tuple(f"eval_{name}" for name in self._metrics)

    def hparam_names(self) -> list[str]:
        return super().hparam_names() + [f"params.{key}" for key in self.params]

    def hparam_value(self, key: str) -> Any:
        if key.startswith("params."):
            return self.params[key[len("params."):]]
        return super().hparam_value(key)

    def check_code(self, search: Sequence[str]) -> str:
        """Find the module in ``search`` and read it without running it (:mod:`jobs.usercode`):
        its path, or a SpecError naming file, line and fix."""
        from . import usercode

        try:
            code = usercode.check(self.module, search)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None
        self._metrics = code.metrics
        return code.path

    def _check(self) -> None:
        super()._check()
        _positive(self, "eval_batch_size", "predict_batch_size")
        from .usercode import module_problem

        problem = module_problem(self.module)
        if problem:
            raise SpecError(problem)
        for key in self.params:
            if not isinstance(key, str) or not key or "." in key:
                raise SpecError(f"params key {_show(key)} is not a name; use names without dots "
                                "(they are what --set params.NAME=VALUE sets)")
            if key in RUNNER_PARAMS:
                raise SpecError(f"params.{key} is what the runner sets (with "
                                f"{', '.join(RUNNER_PARAMS)}); rename it, or use the spec's own "
                                "keys (train_batch_size, seed, learning_rate, ...)")


@dataclass
class CommandSpec:
    """``command``: any program of yours (docs/own-code.md), run in its workdir on every worker
    of the slice (``hosts: all``) or on worker 0 (``hosts: first``). Its contract is the
    environment and signals (:mod:`jobs.command`); the runner's keys (batches, learning rate,
    checkpoints) are the program's own business, so this spec has none of them."""

    job: str = _required("command")
    model_dir: str = _required("where the program writes and finds its checkpoints: TPUCTL_MODEL_DIR "
                               "(gs://bucket/path on GCP, a directory locally)")
    command: list[str] = _required(  # noqa: RUF009 - _required returns a dataclasses.field
        'the program and its arguments, a list of strings: [python, train.py, --epochs, "3"]; '
        "{params.NAME} in an item becomes that param's value", raw=True)
    hosts: str = _opt("all", "all: the command runs on every worker of a slice, which restart together "
                             "(JAX, PyTorch/XLA); first: on worker 0 only (TensorFlow's one client)")
    requirements: str | list[str] | None = _opt(  # noqa: RUF009 - _opt returns a dataclasses.field
        None, "a requirements file in the workdir, or a list of requirements: installed into the run's "
              "environment on each host", raw=True)
    tensorflow: str | None = _opt(None, "a TensorFlow release to install where the image has another "
                                        "(tensorflow-tpu and libtpu on a TPU VM)", raw=True)
    jax: str | None = _opt(None, "a JAX release to install where the image has another (jax[tpu] on a "
                                 "TPU VM)", raw=True)
    params: dict[str, Any] = _opt(  # noqa: RUF009 - _opt returns a dataclasses.field
        {}, "your settings: TPUCTL_PARAMS (JSON) and {params.NAME} in command; --set params.NAME=VALUE "
            "changes one (a sweep's parameters are these)")
    metrics: list[str] | None = _opt(  # noqa: RUF009 - _opt returns a dataclasses.field
        None, "the metric names your program reports in its progress lines (comma-separated): what a "
              "sweep's metric may name")
    num_train_steps: int = _opt(0, "the step your program ends at, for status and ETA (0: unknown, "
                                   "unless your program reports num_train_steps)")
    eval_every_steps: int = _opt(0, "how often a sweep wants a metrics line (TPUCTL_EVAL_EVERY_STEPS); "
                                    "0: at the end")
    save_checkpoints_steps: int = _opt(0, "how often your program checkpoints, for status (0: unknown)")
    stop_grace_seconds: int = _opt(30, "after SIGTERM (the preemption notice) your program has this long to "
                                       "save and exit before it is killed")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ("loss",)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reported_metrics(self) -> tuple[str, ...]:
        """``loss`` and the names ``metrics`` declares: what the program's progress lines carry."""
        return self.REPORTED_METRICS + tuple(m for m in self.metrics or () if m != "loss")

    def hparam_names(self) -> list[str]:
        return sorted(f.name for f in dataclasses.fields(self)) + [f"params.{key}" for key in self.params]

    def hparam_value(self, key: str) -> Any:
        if key.startswith("params."):
            return self.params[key[len("params."):]]
        return getattr(self, key)

    def hparam_values(self) -> dict[str, Any]:
        return {}

    def argv(self) -> list[str]:
        """The command with ``{params.NAME}`` replaced (:func:`jobs.command.substitute`)."""
        from .command import substitute

        try:
            return substitute(self.command, self.params)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None

    def requirement_file(self) -> str | None:
        return self.requirements if isinstance(self.requirements, str) else None

    def check_code(self, search: Sequence[str]) -> str | None:
        """The program and the requirements file the spec names must be in the workdir
        (``search[0]``): the path of the program file, or None when it runs one from PATH."""
        from .command import check_program

        workdir = search[0] if search else None
        req = self.requirement_file()
        if req is not None and (workdir is None or not os.path.isfile(os.path.join(workdir, req))):
            where = f"the workdir {os.path.abspath(workdir)}" if workdir else "the workdir (there is none)"
            raise SpecError(f"requirements file {req} is not in {where}; put it there, list the "
                            "requirements in the spec (requirements: [pkg, ...]), or pass --workdir DIR")
        try:
            return check_program(self.command, workdir)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None

    def _check(self) -> None:
        from .command import command_problem, hosts_problem, requirements_problem, version_problem

        for problem in (command_problem(self.command), hosts_problem(self.hosts),
                        requirements_problem(self.requirements), version_problem("tensorflow", self.tensorflow),
                        version_problem("jax", self.jax)):
            if problem:
                raise SpecError(problem)
        for key in ("num_train_steps", "eval_every_steps", "save_checkpoints_steps"):
            if getattr(self, key) < 0:
                raise SpecError(f"{key} is {getattr(self, key)}; use 0 (unknown) or a positive number of steps")
        if not 1 <= self.stop_grace_seconds <= 3600:
            raise SpecError(f"stop_grace_seconds is {self.stop_grace_seconds}; give your program 1 to 3600 seconds "
                            "to save after SIGTERM (--set stop_grace_seconds=30)")
        for key in self.params:
            if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise SpecError(f"params key {_show(key)} is not a name; use letters, digits and _ "
                                "(they are what --set params.NAME=VALUE and {params.NAME} name)")
        for name in self.metrics or ():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]{0,99}", name):
                raise SpecError(f"metrics names {_show(name)}; use metric names such as accuracy, eval_loss")
        self.argv()


JOBS: dict[str, type[Any]] = {"bert-pretrain": PretrainSpec, "bert-finetune": FinetuneSpec,
                              "bert-squad": SquadSpec, "keras": KerasSpec, "command": CommandSpec}


def reported_metrics(job: str | RunSpec | CommandSpec | type[Any]) -> tuple[str, ...]:
    """The metric names each evaluation of ``job`` reports (progress.json's ``evals``, the
    ``eval/`` scalars, the final ``metrics``): by job name or spec class, every metric the job
    can report; for a loaded spec, those it will report (none without an evaluation set)."""
    if isinstance(job, (RunSpec, CommandSpec)):
        return job.reported_metrics()
    if isinstance(job, type) and issubclass(job, (RunSpec, CommandSpec)):
        return job.REPORTED_METRICS
    if isinstance(job, str) and job in JOBS:
        return JOBS[job].REPORTED_METRICS
    raise SpecError(f"unknown job {_show(job)}; use one of {', '.join(JOBS)}")


# --------------------------------------------------------------------------------------------
# Loading


MAX_SPEC_BYTES = 1 << 20     # a spec is a few dozen lines


def parse_yaml(text: str, what: str) -> Any:
    """The document in ``text`` (``what``, e.g. ``job spec a.yaml``, names it in errors), read by
    the bounded loader with YAML 1.2 numbers: job specs and sweep specs alike. Raises
    :class:`SpecError`."""
    try:
        return bounded_yaml.load(text)
    except bounded_yaml.Refused as exc:
        raise SpecError(f"{what} {exc.reason}; {exc.hint or 'a spec is flat key: value lines'}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{what}{where} is not valid YAML "
                        f"({getattr(exc, 'problem', None) or 'parse error'}); fix the file") from None


def read_yaml(path: str) -> dict[str, Any]:
    """The mapping in the spec file at ``path``: bounded in size, depth and aliases, so hostile
    YAML fails in milliseconds instead of eating memory. Raises :class:`SpecError`."""
    if not os.path.isfile(path):
        raise SpecError(f"job spec {_show(path)} not found; pass the path of a job spec YAML file such "
                        "as templates/bert-finetune.yaml")
    try:
        size = os.path.getsize(path)
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"job spec {path} is {size} bytes; a spec is a few dozen key: value lines "
                            f"(at most {MAX_SPEC_BYTES} bytes): check that this is the right file")
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"job spec {path} is not UTF-8 text; save it as UTF-8 YAML") from None
    except OSError as exc:
        raise SpecError(f"cannot read job spec {path} ({exc.strerror or exc}); check its permissions") from None
    raw = parse_yaml(text, f"job spec {path}")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError(f"job spec {path} must be a mapping of key: value lines, "
                        f"not a {type(raw).__name__}; write one 'key: value' per line, as in "
                        "templates/bert-finetune.yaml")
    return raw


def load(path: str, overrides: Sequence[str] | Sequence[tuple[str, str]] = ()) -> Any:
    """Read the YAML spec at ``path``, apply ``--set`` overrides, and check everything.

    ``overrides`` are ``"key=value"`` strings or ``(key, value)`` pairs; each value is coerced to
    the key's declared type. Raises :class:`SpecError` with one line that names the fix.
    """
    return from_dict(read_yaml(path), overrides, source=path)


def from_dict(raw: dict[str, Any], overrides: Iterable[str] | Iterable[tuple[str, str]] = (),
              source: str = "job spec") -> Any:
    if not isinstance(raw, dict):
        raise SpecError(f"{source} must be a mapping of key: value lines, not a {type(raw).__name__}; write "
                        "one 'key: value' per line, as in templates/bert-finetune.yaml")
    values = dict(raw)
    for key in values:
        if not isinstance(key, str):
            raise SpecError(f"key {_show(key)} in {source} is not a name; spec keys are names such as "
                            "num_train_steps (quote it if it is one)")
    pairs = [_split_override(o) for o in overrides]
    # ``job`` decides which keys exist, so an override of it applies first.
    for key, value in pairs:
        if key == "job":
            values["job"] = value
    job = values.get("job")
    if job is None:
        raise SpecError(f"{source} has no 'job' key; add 'job: bert-pretrain' or "
                        "'job: bert-finetune'")
    if not isinstance(job, str) or job not in JOBS:
        raise SpecError(f"unknown job {_show(job)} in {source}; use one of {', '.join(JOBS)}")
    cls = JOBS[job]
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    entries: list[tuple[str, Any, str]] = []   # ``params.NAME``: an entry of a mapping key
    for key, value in values.items():
        if _entry_of(key, hints):
            entries.append((key, value, "spec"))
            continue
        if key not in fields:
            raise SpecError(f"unknown key {_show(key)} in {source} for {job}; {_suggest(key, fields)}")
        if value is None and fields[key].metadata.get("required"):
            continue  # a template's placeholder: reported below unless --set fills it
        kwargs[key] = value if fields[key].metadata.get("raw") else _coerce(key, value, hints[key], origin="spec")
    for key, value in pairs:
        if _entry_of(key, hints):
            entries.append((key, value, "--set"))
            continue
        if key not in fields:
            raise SpecError(f"unknown key {_show(key)} in --set {_show(key, quote=False)}=...; "
                            f"{_suggest(key, fields)}")
        kwargs[key] = value if fields[key].metadata.get("raw") else _coerce(key, value, hints[key], origin="--set")
    for key, value, origin in entries:
        name, _, entry = key.partition(".")
        mapping = kwargs.setdefault(name, {})
        if entry not in mapping:
            known = ", ".join(sorted(mapping)[:8]) or "none"
            close = _suggest(entry, mapping) if mapping else ""
            hint = f"{close} " if close.startswith("did you") else ""
            raise SpecError(f"{name} has no entry {_show(entry)} ({origin}: {_show(key, quote=False)}); "
                            f"{hint}add it to the spec's {name}: first (its entries: {known})")
        mapping[entry] = _coerce_entry(key, value, mapping[entry], origin)
    spec = cls(**kwargs)
    for name, f in fields.items():
        if (f.metadata.get("required") and getattr(spec, name) in (None, "")
                and (getattr(spec, "do_train", True) or not f.metadata.get("training"))):
            raise SpecError(f"{source} is missing {name} ({f.metadata['doc']}); add '{name}: ...' "
                            f"to the spec or pass --set {name}=...")
    spec._check()
    return spec


def describe(job: str) -> list[tuple[str, str, Any, str]]:
    """(key, type, default, doc) for every key of ``job``: for docs and ``--help`` text."""
    cls = JOBS[job]
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out.append((f.name, _type_name(hints[f.name]), "(required)" if f.metadata.get("required")
                    else default, f.metadata.get("doc", "")))
    return out


# --------------------------------------------------------------------------------------------
# Helpers


def _split_override(item: str | tuple[str, str]) -> tuple[str, str]:
    if isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
        key, value = item
        if not key.strip():
            raise SpecError(f"invalid --set {_show(key + '=' + value)}; use --set key=value, "
                            "such as --set num_train_steps=1000")
        return key.strip(), value
    if not isinstance(item, str):
        raise SpecError(f"invalid --set {_show(item)}; use --set key=value, such as --set num_train_steps=1000")
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"invalid --set {_show(item)}; use --set key=value, "
                        "such as --set num_train_steps=1000")
    return key.strip(), value


def _show(value: Any, *, quote: bool = True, limit: int = 60) -> str:
    """A user's value for a message: bounded (a hostile structure cannot blow up), one line."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxdict, r.maxtuple, r.maxset = 2, 4, 4, 4, 4
    r.maxstring, r.maxother, r.maxlong = limit, limit, 40
    text = r.repr(value) if quote or not isinstance(value, str) else value
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= limit + 2 else text[:limit] + "..."


def _suggest(key: str, fields: dict[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(str(key)[:100], list(fields), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "known keys: " + ", ".join(sorted(fields))


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _coerce(key: str, value: Any, hint: Any, origin: str) -> Any:
    """Convert a YAML value or a ``--set`` string to the declared type of ``key``."""
    base, optional = _unwrap_optional(hint)
    from_string = isinstance(value, str) and origin == "--set"
    if value is None or (optional and isinstance(value, str)
                         and value.strip().lower() in ("null", "~")) \
            or (optional and from_string and value == ""):
        if optional:
            return None
        raise SpecError(f"{key} needs a value of type {_type_name(base)}; set it (--set {key}=...)")
    if typing.get_origin(base) is dict:
        if isinstance(value, dict):
            return dict(value)
        raise SpecError(f"{key} must be a mapping (one 'name: value' line per entry under "
                        f"'{key}:'), got {_show(value)} (from {origin}); set one entry with "
                        f"--set {key}.NAME=VALUE")
    try:
        if base is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise ValueError
        if base is int:
            if isinstance(value, bool):
                raise ValueError
            number: Any = None
            if isinstance(value, int):
                number = value
            elif isinstance(value, float) and value.is_integer():
                number = int(value)
            elif isinstance(value, str) and len(value) <= 40:
                text = value.strip().replace("_", "")
                try:
                    number = int(text)
                except ValueError:
                    as_float = float(text)
                    if as_float.is_integer():
                        number = int(as_float)
            if number is None or abs(number) > MAX_INT:
                raise ValueError
            return number
        if base is float:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, (int, float)) and not (isinstance(value, int) and abs(value) > MAX_INT):
                number = float(value)
            elif isinstance(value, str) and len(value) <= 60:
                number = float(value.strip())
            else:
                raise ValueError
            if not math.isfinite(number):
                raise ValueError
            return number
        if base is str:
            if isinstance(value, (dict, list, bool)):
                raise ValueError
            return str(value)
        if typing.get_origin(base) is list:
            if isinstance(value, str):
                items = [v.strip() for v in value.split(",")]
                return [v for v in items if v]
            if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
                return [str(v) for v in value]
            raise ValueError
    except ValueError:
        pass
    raise SpecError(f"{key} must be {_article(_type_name(base))}, got {_show(value)} "
                    f"(from {origin}); e.g. --set {key}={_example(base)}")


def _entry_of(key: Any, hints: dict[str, Any]) -> bool:
    """Whether ``key`` is ``NAME.ENTRY`` for a mapping key NAME of the spec (``params.hidden``)."""
    if not isinstance(key, str) or "." not in key:
        return False
    name, _, entry = key.partition(".")
    return bool(entry) and typing.get_origin(hints.get(name)) is dict


def _scalar(text: str) -> Any:
    """A ``--set`` string as the YAML scalar a person means: a boolean, null, an integer, a
    number (1e-3 too, which YAML 1.1 leaves a string), else the string itself."""
    word = text.strip()
    if word.lower() in ("true", "false"):
        return word.lower() == "true"
    if word.lower() in ("null", "~", ""):
        return None
    try:
        return int(word.replace("_", ""))
    except ValueError:
        pass
    try:
        number = float(word)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def _coerce_entry(key: str, value: Any, existing: Any, origin: str) -> Any:
    """A new value for the entry ``key`` (``params.NAME``) of the type of the spec's own value:
    a number stays a number, a boolean a boolean, a string a string; a list takes a
    comma-separated ``--set``; an entry that is null in the spec takes any scalar."""
    from_set = isinstance(value, str) and origin == "--set"
    if isinstance(existing, dict):
        raise SpecError(f"{key} is a mapping; change its entries in the spec file")
    if isinstance(existing, str):
        return value if isinstance(value, str) else str(value)
    if isinstance(existing, list):
        if from_set:
            return [_scalar(v) for v in value.split(",") if v.strip()]
        if isinstance(value, list):
            return value
    elif isinstance(existing, bool):
        new = _scalar(value) if from_set else value
        if isinstance(new, bool):
            return new
    elif isinstance(existing, (int, float)):
        new = _scalar(value) if from_set else value
        if isinstance(new, (int, float)) and not isinstance(new, bool) and math.isfinite(new):
            return new
    else:
        return _scalar(value) if from_set else value
    kind = {bool: "boolean", list: "comma-separated list"}.get(type(existing), "number")
    raise SpecError(f"{key} must be {_article(kind)} like its value {_show(existing)} in the spec, "
                    f"got {_show(value)} (from {origin})")


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _type_name(hint: Any) -> str:
    base, _ = _unwrap_optional(hint)
    if typing.get_origin(base) is list:
        name = "comma-separated list"
    else:
        name = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(
            base, "mapping" if typing.get_origin(base) is dict else str(base))
    return name


def _article(name: str) -> str:
    return ("an " if name[0] in "aeiou" else "a ") + name


def _example(base: Any) -> str:
    if typing.get_origin(base) is list:
        return "a,b"
    return {bool: "true", int: "1000", float: "5e-5", str: "VALUE"}.get(base, "VALUE")


def _positive(spec: RunSpec, *keys: str) -> None:
    for key in keys:
        value = getattr(spec, key)
        if value is None or value <= 0:
            raise SpecError(f"{key} must be a positive integer, got {value!r}; "
                            f"e.g. --set {key}={_example(int)}")


def _is_remote(path: str | None) -> bool:
    return bool(path) and "://" in str(path)


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name if _is_remote(base) else os.path.join(base, name)


def _local_checkpoint(path: str) -> bool:
    """A checkpoint prefix, or a directory with a ``checkpoint`` state file or bert_model.ckpt."""
    if os.path.exists(path + ".index"):
        return True
    return os.path.isdir(path) and (os.path.exists(os.path.join(path, "checkpoint"))
                                    or os.path.exists(os.path.join(path, "bert_model.ckpt.index")))


MAX_CONFIG_BYTES = 1 << 20
_CONFIG_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size")


def _check_bert_dir(spec: BertSpec) -> None:
    """Local bert_dir: the files must be there, bert_config.json must be a BERT config that
    describes the checkpoint (names and shapes, read from the index without TensorFlow), and
    max_seq_length must fit the model."""
    where = _show(spec.bert_dir, quote=False, limit=200)   # a path in a message stays one short line
    if _is_remote(spec.bert_dir):
        return  # gs:// is checked by the job itself, through tf.io.gfile.
    if not os.path.isdir(spec.bert_dir):
        raise SpecError(f"bert_dir {where} is not a directory; pass an original BERT "
                        "directory (bert_config.json, vocab.txt, bert_model.ckpt.*) with "
                        "--set bert_dir=PATH")
    for name in ("bert_config.json", "vocab.txt"):
        if not os.path.isfile(os.path.join(spec.bert_dir, name)):
            raise SpecError(f"bert_dir {where} has no {name}; use the directory unpacked "
                            "from a google-research BERT release, or generate a tiny one with "
                            "python -m jobs.bert.tiny DIR")
    config_path = os.path.join(spec.bert_dir, "bert_config.json")
    try:
        if os.path.getsize(config_path) > MAX_CONFIG_BYTES:
            raise ValueError("far too large for a BERT config")
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError(f"{where}/bert_config.json is not valid JSON ({_show(reason, quote=False, limit=80)});"
                        " restore the file from the BERT release") from None
    if not isinstance(config, dict):
        raise SpecError(f"{where}/bert_config.json is not a BERT config (a JSON object with "
                        "vocab_size, hidden_size, ...); restore it from the release")
    for key in _CONFIG_INTS:
        if key in config and (not isinstance(config[key], int) or isinstance(config[key], bool)
                              or not 0 < config[key] <= MAX_INT):
            raise SpecError(f"{where}/bert_config.json: {key} is {_show(config[key])}, not a positive "
                            "integer; restore the file from the BERT release")
    from .bert.config import BertConfig

    try:
        bert = BertConfig.from_dict(config)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{where}/bert_config.json is not a BERT config ({_show(str(exc), quote=False, limit=120)});"
                        " restore it from the release") from None
    if spec.max_seq_length > bert.max_position_embeddings:
        limit = bert.max_position_embeddings
        raise SpecError(f"max_seq_length {spec.max_seq_length} exceeds the model's "
                        f"max_position_embeddings {limit}; use --set max_seq_length={limit} "
                        "or less")
    _check_vocab(spec, bert)
    prefix = os.path.join(spec.bert_dir, "bert_model.ckpt")
    if os.path.exists(prefix + ".index"):
        _check_checkpoint(prefix, bert, where=f"bert_dir {where}")
    elif any(name.startswith("bert_model.ckpt.") for name in os.listdir(spec.bert_dir)):
        raise SpecError(f"bert_dir {where} has bert_model.ckpt data but no bert_model.ckpt.index; "
                        "copy all bert_model.ckpt.* files of the release (index and data)")
    init = spec.resolved_init_checkpoint
    if spec.init_checkpoint and init and not _is_remote(init):
        init_prefix = _local_prefix(init)
        if init_prefix and init_prefix != prefix:
            _check_checkpoint(init_prefix, bert, where=f"init_checkpoint {init}")


def _check_vocab(spec: BertSpec, bert: Any) -> None:
    """vocab.txt gives ids as google-research/bert's loader does (one per line, blank lines
    included); they must fit the embedding table, and do_lower_case must match the model."""
    from .bert.casing import check as check_case
    from .bert.vocab import vocab_lines

    bert_dir = spec.bert_dir
    path = os.path.join(bert_dir, "vocab.txt")
    try:
        if os.path.getsize(path) > MAX_VOCAB_BYTES:
            raise SpecError(f"{bert_dir}/vocab.txt is {os.path.getsize(path)} bytes; a BERT vocabulary "
                            "is one token per line (a few hundred kB); use the release's vocab.txt")
        with open(path, "rb") as f:
            lines = vocab_lines(f.read())
    except OSError as exc:
        raise SpecError(f"cannot read {bert_dir}/vocab.txt ({exc.strerror}); check its permissions") from None
    if not any(lines) or len(lines) > bert.vocab_size:
        raise SpecError(f"{bert_dir}/vocab.txt has {len(lines)} lines (token ids) but bert_config.json says "
                        f"vocab_size {bert.vocab_size}; use the vocab.txt and bert_config.json of the same release")
    try:
        check_case(spec.do_lower_case, bert_dir, spec.resolved_init_checkpoint, lines)
    except SpecError:
        raise
    except ConfigError as exc:
        raise SpecError(str(exc)) from None


def _local_prefix(path: str) -> str | None:
    """The checkpoint prefix a local init_checkpoint names (a prefix, or a directory)."""
    if os.path.exists(path + ".index"):
        return path
    if os.path.isdir(path):
        state = os.path.join(path, "checkpoint")
        if os.path.isfile(state):
            try:
                with open(state, encoding="utf-8") as f:
                    for line in f.read(1 << 16).splitlines():
                        if line.startswith("model_checkpoint_path:") and '"' in line:
                            name = line.split('"')[1]
                            return name if os.path.isabs(name) else os.path.join(path, name)
            except (OSError, ValueError):
                return None
        if os.path.exists(os.path.join(path, "bert_model.ckpt.index")):
            return os.path.join(path, "bert_model.ckpt")
    return None


def _object_key(name: str) -> str:
    """The key of an original variable name in a checkpoint written by the runner (jobs.bert.weights)."""
    return "model/" + name.replace(".", "..").replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"


def _check_checkpoint(prefix: str, bert: Any, *, where: str) -> None:
    """The checkpoint's data shards exist and its encoder variables have the config's shapes."""
    from .bert.ckpt_index import IndexError_, data_files, read_index

    try:
        shapes, shards = read_index(prefix)
    except IndexError_ as exc:
        if exc.corrupt:
            raise SpecError(f"{where}: {os.path.basename(prefix)}.index is not a TensorFlow checkpoint index "
                            f"({exc}); if it is a truncated or corrupted copy, copy the bert_model.ckpt.* "
                            "files again") from None
        return  # a layout this reader does not know: the job checks it with TensorFlow
    except OSError as exc:
        raise SpecError(f"{where}: cannot read {prefix}.index ({exc.strerror}); check its permissions") from None
    for data in data_files(prefix, shards):
        if not os.path.isfile(data):
            raise SpecError(f"{where}: {os.path.basename(data)} is missing next to {os.path.basename(prefix)}.index;"
                            " copy all checkpoint files (index and every data shard)")
    h, L = bert.hidden_size, bert.num_hidden_layers
    want = {"bert/embeddings/word_embeddings": (bert.vocab_size, h),
            "bert/embeddings/position_embeddings": (bert.max_position_embeddings, h),
            "bert/embeddings/token_type_embeddings": (bert.type_vocab_size, h)}
    for i in range(L):
        want[f"bert/encoder/layer_{i}/attention/self/query/kernel"] = (h, h)
        want[f"bert/encoder/layer_{i}/intermediate/dense/kernel"] = (h, bert.intermediate_size)
    hint = "use the bert_config.json that came with this checkpoint"

    def shape_of(name: str) -> tuple[int, ...] | None:
        return shapes.get(name, shapes.get(_object_key(name)))

    if shape_of("bert/embeddings/word_embeddings") is None:
        if any(k.startswith(("bert/", "model/bert.S")) for k in shapes):
            raise SpecError(f"{where}: checkpoint {prefix} has no bert/embeddings/word_embeddings; it is not "
                            "a complete BERT checkpoint")
        return  # not a checkpoint in BERT's names at all (e.g. a model_dir of another job): the job decides
    for name, shape in want.items():
        got = shape_of(name)
        if got is None:
            raise SpecError(f"bert_config.json does not match checkpoint {prefix}: it has no {name} "
                            f"(the config says num_hidden_layers {L}); {hint}")
        if tuple(got) != shape:
            raise SpecError(f"bert_config.json does not match checkpoint {prefix}: {name} is {list(got)} in "
                            f"the checkpoint but {list(shape)} by the config; {hint}")
    extra = f"bert/encoder/layer_{L}/attention/self/query/kernel"
    if shape_of(extra) is not None:
        raise SpecError(f"bert_config.json does not match checkpoint {prefix}: the checkpoint has more than "
                        f"num_hidden_layers {L} layers; {hint}")


def _check_globs(spec: RunSpec, key: str) -> None:
    value = getattr(spec, key)
    if not value:
        return
    for pattern in [p.strip() for p in value.split(",") if p.strip()]:
        if _is_remote(pattern):
            continue
        if not glob.glob(pattern):
            raise SpecError(f"{key} pattern {pattern} matches no file; check the path "
                            f"(--set {key}=PATH[,PATH...])")
