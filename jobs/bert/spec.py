"""The keys of the three BERT jobs (``bert-pretrain``, ``bert-finetune``, ``bert-squad``) and
their checks: an original BERT directory whose config, vocabulary and checkpoint agree, read
without TensorFlow (the control plane checks a spec before a TPU starts).

The run keys they share with every job are :class:`jobs.spec.base.RunSpec`'s.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigError
from ..spec.base import MAX_INT, RunSpec, SpecError, is_remote, opt, positive, required, show
from .vocab import MAX_VOCAB_BYTES


@dataclass
class BertSpec(RunSpec):
    """The run keys plus an original BERT directory: what every built-in BERT job has."""

    bert_dir: str = required("an original google-research BERT directory: bert_config.json, "
                              "vocab.txt and usually bert_model.ckpt.*", path="bert_dir")
    init_checkpoint: str | None = opt(
        None, "checkpoint to start from when model_dir has none to resume (a prefix, or a "
              "directory: its newest checkpoint); default <bert_dir>/bert_model.ckpt if present; "
              "'none' trains from scratch", path="checkpoint")
    do_lower_case: bool = opt(True, "lower-case and strip accents (uncased and Chinese models)")
    max_seq_length: int = opt(128, "tokens per sequence, [CLS] and [SEP] included")

    @property
    def resolved_init_checkpoint(self) -> str | None:
        """``init_checkpoint`` with its default applied (``None``: train from scratch)."""
        value = self.init_checkpoint
        if value is None:
            default = _join(self.bert_dir, "bert_model.ckpt")
            if is_remote(default) or os.path.exists(default + ".index"):
                return default
            return None
        if value.lower() == "none":
            return None
        return value

    def _check(self) -> None:
        positive(self, "max_seq_length")
        super()._check()
        if self.max_seq_length < 8:
            raise SpecError("max_seq_length must be at least 8 (--set max_seq_length=128)")
        _check_bert_dir(self)
        init = self.resolved_init_checkpoint
        if self.init_checkpoint and init and not is_remote(init) and not _local_checkpoint(init):
            raise SpecError(f"init_checkpoint {init} not found ({init}.index is missing); pass the "
                            "checkpoint prefix, e.g. --set init_checkpoint=DIR/bert_model.ckpt, "
                            "a run's model_dir, or 'none' to train from scratch")


@dataclass
class PretrainSpec(BertSpec):
    """``bert-pretrain``: the original run_pretraining.py, plus optional data creation."""

    input_files: str | None = opt(None, "TFRecord shards from create_pretraining_data "
                                         "(comma-separated globs); or give corpus_files",
                                   path="glob")
    corpus_files: str | None = opt(None, "plain-text corpus (one sentence per line, blank line "
                                          "between documents; comma-separated globs): the job "
                                          "writes TFRecord shards into <model_dir>/pretraining_data "
                                          "first", path="glob")
    max_predictions_per_seq: int = opt(20, "masked positions per sequence")
    masked_lm_prob: float = opt(0.15, "data creation: fraction of tokens masked")
    dupe_factor: int = opt(10, "data creation: passes over the corpus with different masks")
    short_seq_prob: float = opt(0.1, "data creation: fraction of shorter sequences")
    do_whole_word_mask: bool = opt(False, "data creation: mask all word pieces of a word together")
    num_shards: int = opt(4, "data creation: TFRecord shards written")
    export_bert_dir: bool = opt(True, "at the end write <model_dir>/export: bert_config.json, "
                                       "vocab.txt and bert_model.ckpt in the original variable names")
    eval_batch_size: int = opt(8, "global batch size for evaluation")
    max_eval_steps: int = opt(100, "evaluation batches: as run_pretraining.py's do_eval, the "
                                    "first max_eval_steps x eval_batch_size examples of the data, "
                                    "in file order")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = (
        "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "next_sentence_loss")

    def _check(self) -> None:
        super()._check()
        positive(self, "eval_batch_size", "max_eval_steps")
        if bool(self.input_files) == bool(self.corpus_files):
            raise SpecError("give exactly one of input_files (TFRecord shards) and corpus_files "
                            "(plain text), e.g. --set input_files='gs://bucket/data/*.tfrecord'")
        positive(self, "max_predictions_per_seq", "dupe_factor", "num_shards")
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

    do_train: bool = opt(True, "false: predict only (no training): load init_checkpoint, a "
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

    learning_rate: float = opt(5e-5, "peak learning rate of AdamW")
    num_train_steps: int = opt(1000, "total optimizer steps (epochs x examples / batch)")
    train_file: str = required("training examples: .tsv or .csv with columns text[, text_b], "
                                "label (a header row naming them is optional); not needed "
                                "when do_train is false", path="file", training=True)
    dev_file: str | None = opt(None, "evaluation examples, same format; accuracy is reported "
                                      "when the run ends", path="file")
    labels: list[str] | None = opt(  # noqa: RUF009 - opt returns a dataclasses.field
        None, "label values in order (comma-separated); default: the sorted distinct labels "
              "of train_file")
    eval_batch_size: int = opt(8, "global batch size for evaluation")
    test_file: str | None = opt(None, "examples to label after training, same columns as "
                                       "train_file with or without the label: "
                                       "<model_dir>/test_results.tsv (one row of label "
                                       "probabilities per line, in order) and predictions.jsonl",
                                 path="file")
    predict_batch_size: int = opt(8, "global batch size for predicting test_file")
    classifier_dropout: float = opt(0.1, "dropout on the pooled output, as run_classifier.py")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ("eval_accuracy", "eval_loss")

    def reported_metrics(self) -> tuple[str, ...]:
        return self.REPORTED_METRICS if self.dev_file else ()

    def _check(self) -> None:
        if self.num_train_steps == 0:  # as run_classifier.py without do_train
            self.do_train = False
        self._check_predict_only("test_file")
        super()._check()
        positive(self, "eval_batch_size", "predict_batch_size")
        for key in ("train_file", "dev_file", "test_file"):
            value = getattr(self, key)
            if value and not is_remote(value) and not os.path.isfile(value):
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

    learning_rate: float = opt(3e-5, "peak learning rate of AdamW")
    max_seq_length: int = opt(384, "tokens per window: [CLS] question [SEP] context [SEP]")
    num_train_steps: int = opt(0, "total optimizer steps; 0: num_train_epochs x training "
                                   "questions / train_batch_size (as run_squad.py)")
    num_train_epochs: float = opt(2.0, "epochs over the training questions when "
                                        "num_train_steps is 0")
    train_file: str = required("SQuAD JSON to train on (train-v1.1.json, train-v2.0.json); "
                                "not needed when do_train is false", path="file", training=True)
    predict_file: str | None = opt(None, "SQuAD JSON to predict after training (dev-v1.1.json): "
                                          "predictions.json and eval_results.json (EM, F1)",
                                    path="file")
    version_2_with_negative: bool = opt(False, "SQuAD v2.0: questions may have no answer")
    doc_stride: int = opt(128, "tokens between the starts of consecutive context windows")
    max_query_length: int = opt(64, "question tokens kept")
    n_best_size: int = opt(20, "start and end candidates per window when decoding")
    max_answer_length: int = opt(30, "longest answer, in sub-tokens")
    null_score_diff_threshold: float = opt(0.0, "v2.0: predict no answer when the null score "
                                                 "exceeds the best span's by more than this")
    predict_batch_size: int = opt(8, "global batch size for prediction")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ("exact_match", "f1")

    def reported_metrics(self) -> tuple[str, ...]:
        return self.REPORTED_METRICS if self.predict_file else ()

    def _check(self) -> None:
        from . import squad_check as squad  # pure Python: no TensorFlow

        self._check_predict_only("predict_file")
        if self.num_train_epochs is None or not self.num_train_epochs > 0:
            raise SpecError(f"num_train_epochs is {self.num_train_epochs}; use a positive number "
                            "such as --set num_train_epochs=2")
        positive(self, "doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                  "predict_batch_size")
        for key in ("train_file", "predict_file"):
            value = getattr(self, key)
            if value and not is_remote(value):
                try:
                    count = squad.check_file(value, key == "train_file",
                                             self.version_2_with_negative)
                except squad.SquadError as exc:
                    message = str(exc).replace(value, show(value, quote=False, limit=200))
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



def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name if is_remote(base) else os.path.join(base, name)


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
    where = show(spec.bert_dir, quote=False, limit=200)   # a path in a message stays one short line
    if is_remote(spec.bert_dir):
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
        raise SpecError(f"{where}/bert_config.json is not valid JSON ({show(reason, quote=False, limit=80)});"
                        " restore the file from the BERT release") from None
    if not isinstance(config, dict):
        raise SpecError(f"{where}/bert_config.json is not a BERT config (a JSON object with "
                        "vocab_size, hidden_size, ...); restore it from the release")
    for key in _CONFIG_INTS:
        if key in config and (not isinstance(config[key], int) or isinstance(config[key], bool)
                              or not 0 < config[key] <= MAX_INT):
            raise SpecError(f"{where}/bert_config.json: {key} is {show(config[key])}, not a positive "
                            "integer; restore the file from the BERT release")
    from .config import BertConfig

    try:
        bert = BertConfig.from_dict(config)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{where}/bert_config.json is not a BERT config ({show(str(exc), quote=False, limit=120)});"
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
    if spec.init_checkpoint and init and not is_remote(init):
        init_prefix = _local_prefix(init)
        if init_prefix and init_prefix != prefix:
            _check_checkpoint(init_prefix, bert, where=f"init_checkpoint {init}")


def _check_vocab(spec: BertSpec, bert: Any) -> None:
    """vocab.txt gives ids as google-research/bert's loader does (one per line, blank lines
    included); they must fit the embedding table, and do_lower_case must match the model."""
    from .casing import check as check_case
    from .vocab import vocab_lines

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
    from .ckpt_index import IndexError_, data_files, read_index

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
        if is_remote(pattern):
            continue
        if not glob.glob(pattern):
            raise SpecError(f"{key} pattern {pattern} matches no file; check the path "
                            f"(--set {key}=PATH[,PATH...])")
