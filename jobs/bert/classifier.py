"""``bert-finetune``: sentence (pair) classification from a TSV/CSV file, as run_classifier.py.

Each example is ``[CLS] text [SEP]`` or ``[CLS] text [SEP] text_b [SEP]`` (the longer side
trimmed first when the pair is too long), segment ids 0 then 1, zero padding to
``max_seq_length``. The model is the encoder, dropout 0.1 on the pooled output and a linear
layer (``output_weights`` / ``output_bias``, the original names); the loss is the mean
cross-entropy. Accuracy and loss on ``dev_file`` (``eval_accuracy``, ``eval_loss``) are reported
every ``eval_every_steps`` and when training ends (TensorBoard ``eval/``, progress.json), and
written to ``<model_dir>/eval_results.json`` at the end.

As run_classifier.py writes ``train.tf_record``, the job tokenizes the files once per start into
TFRecord shards in ``<model_dir>/finetune_data`` (deterministically: a restart writes the same
bytes) and trains from them through tf.data (:mod:`jobs.data`: the epoch stream, so a resumed
run continues with the very examples the uninterrupted run would have seen). The dev set is
written padded to whole eval batches (weight-0 rows; ``eval_batch_size`` rounded up to whole
per-replica batches of the slice, so any value fits any slice) and evaluated in one device loop.

File format: tab-separated for ``.tsv``/``.txt``, comma-separated (quoted as CSV) for ``.csv``.
Either a header row naming the columns (``text`` or ``sentence``/``text_a``/``sentence1``,
optional ``text_b``/``sentence2``, and ``label``), or no header and the columns
``text, label`` or ``text, text_b, label``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from .. import data
from ..errors import ConfigError
from ..job import Job, log
from ..spec import FinetuneSpec
from . import check_case, read_config
from .modeling import ClassifierModel
from .tokenization import CLS, SEP, FullTokenizer

TEXT_COLUMNS = ("text", "text_a", "sentence", "sentence1")
PAIR_COLUMNS = ("text_b", "sentence2")
DATA_DIR = "finetune_data"


@dataclass
class Example:
    text: str
    text_b: str | None
    label: str


def read_examples(path: str) -> list[Example]:
    """Examples of a TSV/CSV file (any TensorFlow filesystem); one-line errors for bad rows."""
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    if path.lower().endswith(".csv"):
        rows = list(csv.reader(io.StringIO(text)))
    else:
        rows = list(csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        raise ConfigError(f"{path} has no examples; it needs one example per line: text, "
                          "[text_b,] label")
    header = [c.strip().lower() for c in rows[0]]
    if "label" in header:
        rows = rows[1:]
        label_col = header.index("label")
        text_col = next((header.index(c) for c in TEXT_COLUMNS if c in header), None)
        pair_col = next((header.index(c) for c in PAIR_COLUMNS if c in header), None)
        if text_col is None:
            raise ConfigError(f"{path}: the header has no text column; name it one of "
                              f"{', '.join(TEXT_COLUMNS)}")
    else:
        width = len(rows[0])
        if width not in (2, 3):
            raise ConfigError(f"{path} line 1 has {width} columns; use text<TAB>label or "
                              "text<TAB>text_b<TAB>label (or a header row naming the columns)")
        text_col, pair_col, label_col = 0, (1 if width == 3 else None), width - 1
    examples = []
    needed = max(c for c in (text_col, pair_col, label_col) if c is not None)
    for number, row in enumerate(rows, start=2 if "label" in header else 1):
        if len(row) <= needed:
            raise ConfigError(f"{path} line {number} has {len(row)} columns, expected "
                              f"{needed + 1}; check for a missing tab or label")
        examples.append(Example(row[text_col], row[pair_col] if pair_col is not None else None,
                                row[label_col].strip()))
    return examples


def encode(example: Example, tokenizer: FullTokenizer, max_seq_length: int) -> tuple[list, list, list]:
    """(token_ids, segment_ids, padding_mask), padded to ``max_seq_length``."""
    a = tokenizer.tokenize(example.text)
    b = tokenizer.tokenize(example.text_b) if example.text_b else []
    budget = max_seq_length - (3 if b else 2)
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    tokens = [CLS, *a, SEP] + ([*b, SEP] if b else [])
    segments = [0] * (len(a) + 2) + [1] * (len(b) + 1 if b else 0)
    ids = tokenizer.convert_tokens_to_ids(tokens)
    pad = max_seq_length - len(ids)
    return ids + [0] * pad, segments + [0] * pad, [1] * len(ids) + [0] * pad


def to_arrays(examples: list[Example], labels: list[str], tokenizer: FullTokenizer,
              max_seq_length: int, path: str) -> dict[str, np.ndarray]:
    index = {label: i for i, label in enumerate(labels)}
    rows = [encode(e, tokenizer, max_seq_length) for e in examples]
    unknown = sorted({e.label for e in examples if e.label not in index})
    if unknown:
        raise ConfigError(f"{path} has label(s) {', '.join(map(repr, unknown[:3]))} not in "
                          f"labels ({', '.join(labels)}); add them with --set labels=...")
    return {"token_ids": np.array([r[0] for r in rows], np.int32),
            "segment_ids": np.array([r[1] for r in rows], np.int32),
            "padding_mask": np.array([r[2] for r in rows], np.int32),
            "label": np.array([index[e.label] for e in examples], np.int32),
            "weight": np.ones(len(examples), np.float32)}


def pad_to_batches(arrays: dict[str, np.ndarray], global_batch: int) -> dict[str, np.ndarray]:
    """Append weight-0 rows up to a whole number of global batches."""
    n = len(arrays["label"])
    padded = -(-n // global_batch) * global_batch
    return {k: np.concatenate([v, np.zeros((padded - n,) + v.shape[1:], v.dtype)])
            for k, v in arrays.items()}


class ClassifierJob(Job):
    metric_names = ("accuracy",)

    def __init__(self, spec: FinetuneSpec):
        super().__init__(spec)
        self.spec: FinetuneSpec = spec

    def prepare(self, runner) -> None:
        s = self.spec
        self.config = read_config(s.bert_dir)
        if s.max_seq_length > self.config.max_position_embeddings:
            raise ConfigError(f"max_seq_length {s.max_seq_length} exceeds "
                              f"max_position_embeddings {self.config.max_position_embeddings}")
        check_case(s)
        tokenizer = FullTokenizer(f"{s.bert_dir.rstrip('/')}/vocab.txt", s.do_lower_case)
        train = read_examples(s.train_file)
        if not train:
            raise ConfigError(f"{s.train_file} has a header but no examples; add one example per line "
                              "(text<TAB>label, or text<TAB>text_b<TAB>label)")
        self.labels = list(s.labels) if s.labels else sorted({e.label for e in train})
        if len(self.labels) < 2:
            raise ConfigError(f"{s.train_file} has a single label {self.labels[0]!r}; a "
                              "classifier needs at least two")
        arrays = to_arrays(train, self.labels, tokenizer, s.max_seq_length, s.train_file)
        dev = None
        if s.dev_file:
            dev = to_arrays(read_examples(s.dev_file), self.labels, tokenizer,
                            s.max_seq_length, s.dev_file)
        with tf.io.gfile.GFile(f"{runner.out_dir}/labels.txt", "w") as f:
            f.write("".join(f"{label}\n" for label in self.labels))
        out_dir = f"{runner.out_dir}/{DATA_DIR}"
        n = len(train)
        self.stream = data.write_stream(out_dir, arrays, n, s.seed, log)
        self.dev_file = self.dev_examples = None
        if dev is not None:
            self.dev_examples = len(dev["label"])
            self.eval_batch = runner.fitted_batch(s.eval_batch_size)
            padded = pad_to_batches(dev, self.eval_batch)
            self.dev_file = f"{out_dir}/dev.tfrecord"
            data.write_records(self.dev_file, padded, range(len(padded["label"])))
            self.dev_batches = len(padded["label"]) // self.eval_batch
        log(f"{n} training examples ({n / s.train_batch_size:.1f} steps per epoch), labels "
            f"{self.labels}" + (f", {self.dev_examples} dev examples" if dev is not None else ""))

    def parse(self, records):
        n = self.spec.max_seq_length
        schema = {"token_ids": tf.io.FixedLenFeature([n], tf.int64),
                  "segment_ids": tf.io.FixedLenFeature([n], tf.int64),
                  "padding_mask": tf.io.FixedLenFeature([n], tf.int64),
                  "label": tf.io.FixedLenFeature([], tf.int64),
                  "weight": tf.io.FixedLenFeature([], tf.float32)}
        ex = tf.io.parse_example(records, schema)
        return {k: (v if v.dtype == tf.float32 else tf.cast(v, tf.int32)) for k, v in ex.items()}

    def dataset(self, ctx: tf.distribute.InputContext, position: int) -> tf.data.Dataset:
        return data.stream_batches(self.stream, position, ctx, self.spec.train_batch_size,
                                   self.parse)

    def build_model(self):
        return ClassifierModel(self.config, len(self.labels), self.spec.classifier_dropout)

    def loss_counts(self, features):
        return {"examples": tf.reduce_sum(features["weight"])}

    def loss(self, model, features, training: bool, seed=None, totals=None):
        """Mean cross-entropy over the global batch (this replica's share)."""
        examples = (totals or self.loss_counts(features))["examples"]
        logits = model(features, training=training, seed=seed)["logits"]
        w = features["weight"]
        loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=features["label"], logits=logits) * w) / examples
        correct = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), features["label"])
        return loss, {"accuracy": tf.reduce_sum(tf.cast(correct, tf.float32) * w) / examples}

    def init_variables(self, variables):
        encoder_only = {k: v for k, v in variables.items() if k.startswith("bert/")}
        return encoder_only, lambda name: True

    def finish(self, runner) -> dict[str, float]:
        if self.dev_file is None:
            return {}
        results = self.evaluate(runner)
        with tf.io.gfile.GFile(f"{runner.out_dir}/eval_results.json", "w") as f:
            f.write(json.dumps(results, indent=2, sort_keys=True) + "\n")
        return {k: results[k] for k in self.spec.REPORTED_METRICS}

    def eval_metrics(self, runner) -> dict[str, float]:
        if self.dev_file is None:
            return {}
        results = self.evaluate(runner)
        return {k: results[k] for k in self.spec.REPORTED_METRICS}

    def evaluate(self, runner) -> dict[str, float]:
        """Accuracy and mean loss on dev_file, every example counted exactly once, in one
        device loop over the padded dev records."""
        totals = runner.evaluate_sums(self.eval_dataset, self.eval_sums,
                                      ("correct", "loss", "count"), self.dev_batches)
        count = max(totals["count"], 1.0)
        return {"eval_accuracy": totals["correct"] / count, "eval_loss": totals["loss"] / count,
                "eval_examples": totals["count"], "global_step": float(runner.optimizer.step.numpy())}

    def eval_dataset(self, ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return data.host_batches(data.in_order([self.dev_file]), ctx, self.eval_batch, self.parse)

    def eval_sums(self, model, batch) -> dict[str, tf.Tensor]:
        logits = model(batch, training=False)["logits"]
        w = batch["weight"]
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["label"], logits=logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                                   batch["label"]), tf.float32)
        return {"correct": tf.reduce_sum(correct * w), "loss": tf.reduce_sum(loss * w),
                "count": tf.reduce_sum(w)}
