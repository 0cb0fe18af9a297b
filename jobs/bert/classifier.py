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
from keras import ops

from .. import data
from ..errors import ConfigError
from ..job import JobContext, log
from . import check_case, read_config, weights
from .job import BertJob
from .modeling import ClassifierModel, correct, cross_entropy
from .spec import FinetuneSpec
from .tokenization import CLS, SEP, FullTokenizer

TEXT_COLUMNS = ("text", "text_a", "sentence", "sentence1")
PAIR_COLUMNS = ("text_b", "sentence2")
DATA_DIR = "finetune_data"
TEST_RESULTS = "test_results.tsv"
PREDICTIONS = "predictions.jsonl"


@dataclass
class Example:
    text: str
    text_b: str | None
    label: str | None  # None: a test example without a label


def _rows(path: str) -> list[list[str]]:
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    if path.lower().endswith(".csv"):
        rows = list(csv.reader(io.StringIO(text)))
    else:
        rows = list(csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r for r in rows if r and any(c.strip() for c in r)]


def read_examples(path: str) -> list[Example]:
    """Examples of a TSV/CSV file (any TensorFlow filesystem); one-line errors for bad rows."""
    rows = _rows(path)
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


def read_test_examples(path: str, pair: bool | None) -> list[Example]:
    """Examples to label: the columns of training (``text`` and, if training had pairs,
    ``text_b``), the label column optional (``label`` None when absent). A header row names
    the columns as in :func:`read_examples`. ``pair`` None (no training data to compare with):
    without a header, 2 columns are ``text, label`` and 3 ``text, text_b, label``."""
    rows = _rows(path)
    if not rows:
        raise ConfigError(f"{path} has no examples; it needs one line per example to label")
    if pair is None and not any(c.strip().lower() in TEXT_COLUMNS for c in rows[0]):
        pair = len(rows[0]) == 3
    texts = 2 if pair else 1
    shape = "text<TAB>text_b[<TAB>label]" if pair else "text[<TAB>label]"
    header = [c.strip().lower() for c in rows[0]]
    first = 1
    if any(c in header for c in TEXT_COLUMNS):
        rows, first = rows[1:], 2
        text_col = next(header.index(c) for c in TEXT_COLUMNS if c in header)
        pair_col = next((header.index(c) for c in PAIR_COLUMNS if c in header), None)
        label_col = header.index("label") if "label" in header else None
        if pair is not None and (pair_col is not None) != pair:
            raise ConfigError(f"{path} has {1 + (pair_col is not None)} text column(s) but "
                              f"training had {texts}; give {shape}")
    else:
        width = len(rows[0])
        if width not in (texts, texts + 1):
            raise ConfigError(f"{path} line 1 has {width} columns but training had {texts} text "
                              f"column(s); give {shape}")
        text_col, pair_col = 0, (1 if pair else None)
        label_col = texts if width == texts + 1 else None
    needed = max(c for c in (text_col, pair_col, label_col) if c is not None)
    examples = []
    for number, row in enumerate(rows, start=first):
        if len(row) <= needed:
            raise ConfigError(f"{path} line {number} has {len(row)} columns, expected "
                              f"{needed + 1}; check for a missing tab")
        examples.append(Example(row[text_col], row[pair_col] if pair_col is not None else None,
                                row[label_col].strip() if label_col is not None else None))
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
    unknown = sorted({e.label for e in examples if e.label is not None and e.label not in index})
    if unknown:
        raise ConfigError(f"{path} has label(s) {', '.join(map(repr, unknown[:3]))} not in "
                          f"labels ({', '.join(labels)}); add them with --set labels=...")
    return {"token_ids": np.array([r[0] for r in rows], np.int32),
            "segment_ids": np.array([r[1] for r in rows], np.int32),
            "padding_mask": np.array([r[2] for r in rows], np.int32),
            "label": np.array([index.get(e.label, 0) for e in examples], np.int32),
            "index": np.arange(len(examples), dtype=np.int32),
            "weight": np.ones(len(examples), np.float32)}


def write_whole(path: str, text: str) -> None:
    """Write ``text`` to a temporary file and rename it to ``path``: never a partial file."""
    with tf.io.gfile.GFile(f"{path}.tmp", "w") as f:
        f.write(text)
    tf.io.gfile.rename(f"{path}.tmp", path, overwrite=True)


def write_outputs(out_dir: str, probabilities: np.ndarray, labels: list[str]) -> None:
    """``test_results.tsv`` (run_classifier.py's do_predict: one line per example, the class
    probabilities tab-separated in label order, no header) and ``predictions.jsonl``
    (``{"index", "label", "probabilities"}``), each written whole and renamed into place, so a
    run preempted and resumed leaves each file once, complete."""
    rows = ["\t".join(str(np.float32(p)) for p in row) + "\n" for row in probabilities]
    lines = [json.dumps({"index": i, "label": labels[int(np.argmax(row))],
                         "probabilities": [float(p) for p in row]}) + "\n"
             for i, row in enumerate(probabilities)]
    tf.io.gfile.makedirs(out_dir)
    for name, text in ((TEST_RESULTS, "".join(rows)), (PREDICTIONS, "".join(lines))):
        write_whole(f"{out_dir}/{name}", text)


def pad_to_batches(arrays: dict[str, np.ndarray], global_batch: int) -> dict[str, np.ndarray]:
    """Append weight-0 rows up to a whole number of global batches."""
    n = len(arrays["label"])
    padded = -(-n // global_batch) * global_batch
    return {k: np.concatenate([v, np.zeros((padded - n,) + v.shape[1:], v.dtype)])
            for k, v in arrays.items()}


class ClassifierJob(BertJob):
    metric_names = ("accuracy",)

    def __init__(self, spec: FinetuneSpec):
        super().__init__(spec)
        self.spec: FinetuneSpec = spec

    def prepare(self, ctx: JobContext) -> None:
        s = self.spec
        self.config = read_config(s.bert_dir)
        if s.max_seq_length > self.config.max_position_embeddings:
            raise ConfigError(f"max_seq_length {s.max_seq_length} exceeds "
                              f"max_position_embeddings {self.config.max_position_embeddings}")
        check_case(s)
        tokenizer = FullTokenizer(f"{s.bert_dir.rstrip('/')}/vocab.txt", s.do_lower_case)
        train = read_examples(s.train_file) if s.do_train else []
        if s.do_train and not train:
            raise ConfigError(f"{s.train_file} has a header but no examples; add one example per line "
                              "(text<TAB>label, or text<TAB>text_b<TAB>label)")
        self.labels = self.fine_tuned_labels(ctx) if not s.do_train else (
            list(s.labels) if s.labels else sorted({e.label for e in train}))
        if len(self.labels) < 2:
            raise ConfigError(f"{s.train_file} has a single label {self.labels[0]!r}; a "
                              "classifier needs at least two")
        dev = None
        if s.dev_file:
            dev = to_arrays(read_examples(s.dev_file), self.labels, tokenizer,
                            s.max_seq_length, s.dev_file)
            dev.pop("index")
        self.pair = any(e.text_b is not None for e in train) if train else None
        test = None
        if s.test_file:
            test = to_arrays(read_test_examples(s.test_file, self.pair), self.labels, tokenizer,
                             s.max_seq_length, s.test_file)
        with tf.io.gfile.GFile(f"{ctx.out_dir}/labels.txt", "w") as f:
            f.write("".join(f"{label}\n" for label in self.labels))
        out_dir = f"{ctx.out_dir}/{DATA_DIR}"
        tf.io.gfile.makedirs(out_dir)
        n = len(train)
        self.stream = None
        if s.do_train:
            arrays = to_arrays(train, self.labels, tokenizer, s.max_seq_length, s.train_file)
            arrays.pop("index")  # only test records carry their line number
            self.stream = data.write_stream(out_dir, arrays, n, s.seed, log)
        self.dev_file = self.dev_examples = None
        if dev is not None:
            self.dev_examples = len(dev["label"])
            self.eval_batch = ctx.fitted_batch(s.eval_batch_size)
            padded = pad_to_batches(dev, self.eval_batch)
            self.dev_file = f"{out_dir}/dev.tfrecord"
            data.write_records(self.dev_file, padded, range(len(padded["label"])))
            self.dev_batches = len(padded["label"]) // self.eval_batch
        self.test_file = self.test_examples = None
        if test is not None:
            self.test_examples = len(test["index"])
            self.predict_batch = ctx.fitted_batch(s.predict_batch_size)
            padded = pad_to_batches(test, self.predict_batch)
            padded["index"][self.test_examples:] = -1
            self.test_file = f"{out_dir}/test.tfrecord"
            data.write_records(self.test_file, padded, range(len(padded["index"])))
            self.test_batches = len(padded["index"]) // self.predict_batch
        log((f"{n} training examples ({n / s.train_batch_size:.1f} steps per epoch)"
             if s.do_train else "predict only") + f", labels {self.labels}" + (f", {self.dev_examples} dev examples" if dev is not None else "")
            + (f", {self.test_examples} test examples" if test is not None else ""))

    def parse(self, records):
        n = self.spec.max_seq_length
        schema = {"token_ids": tf.io.FixedLenFeature([n], tf.int64),
                  "segment_ids": tf.io.FixedLenFeature([n], tf.int64),
                  "padding_mask": tf.io.FixedLenFeature([n], tf.int64),
                  "label": tf.io.FixedLenFeature([], tf.int64),
                  "index": tf.io.FixedLenFeature([], tf.int64, default_value=0),
                  "weight": tf.io.FixedLenFeature([], tf.float32)}
        ex = tf.io.parse_example(records, schema)
        return {k: (v if v.dtype == tf.float32 else tf.cast(v, tf.int32)) for k, v in ex.items()}

    def dataset(self, ctx: tf.distribute.InputContext, position: int) -> tf.data.Dataset:
        return data.stream_batches(self.stream, position, ctx, self.spec.train_batch_size,
                                   self.parse)

    def build_model(self):
        return ClassifierModel(self.config, len(self.labels), self.spec.classifier_dropout)

    def loss_counts(self, features):
        return {"examples": ops.sum(features["weight"])}

    def loss(self, model, features, training: bool, seed=None, totals=None):
        """Mean cross-entropy over the global batch (this replica's share). keras.ops: traced
        on either backend."""
        examples = (totals or self.loss_counts(features))["examples"]
        logits = model(features, training=training, seed=seed)["logits"]
        w = features["weight"]
        loss = ops.sum(cross_entropy(features["label"], logits) * w) / examples
        return loss, {"accuracy": ops.sum(correct(logits, features["label"]) * w) / examples}

    def fine_tuned_labels(self, ctx: JobContext) -> list[str]:
        """A predict-only run's labels: ``labels``, else the labels.txt beside the fine-tuned
        checkpoint, else train_file's; as many as the checkpoint's classifier has."""
        s = self.spec
        prefix, shape = weights.fine_tuned_checkpoint(ctx.model_dir,
                                                      s.resolved_init_checkpoint,
                                                      "output_weights", "bert-finetune")
        beside = f"{prefix.rsplit('/', 1)[0] if '/' in prefix else '.'}/labels.txt"
        if s.labels:
            labels = list(s.labels)
        elif tf.io.gfile.exists(beside):
            with tf.io.gfile.GFile(beside) as f:
                labels = [line.strip() for line in f if line.strip()]
        elif s.train_file:
            labels = sorted({e.label for e in read_examples(s.train_file)})
        else:
            raise ConfigError(f"no labels.txt beside {prefix}; give the labels in training "
                              "order with --set labels=a,b,...")
        if len(labels) != shape[0]:
            raise ConfigError(f"checkpoint {prefix} has a classifier for {shape[0]} labels but "
                              f"the labels are {', '.join(labels)}; give --set labels=... in "
                              "training order")
        return labels

    def init_variables(self, variables):
        if not self.spec.do_train:  # a fine-tuned checkpoint: the head too
            return variables, lambda name: True
        encoder_only = {k: v for k, v in variables.items() if k.startswith("bert/")}
        return encoder_only, lambda name: True

    def finish(self, ctx: JobContext) -> dict[str, float]:
        if self.test_file is not None:
            self.write_predictions(ctx)
        self.export(ctx)
        if self.dev_file is None:
            return {}
        results = self.evaluate(ctx)
        with tf.io.gfile.GFile(f"{ctx.out_dir}/eval_results.json", "w") as f:
            f.write(json.dumps(results, indent=2, sort_keys=True) + "\n")
        self.outputs.append("eval_results.json")
        return {k: results[k] for k in self.spec.REPORTED_METRICS}

    def eval_metrics(self, ctx: JobContext) -> dict[str, float]:
        if self.dev_file is None:
            return {}
        results = self.evaluate(ctx)
        return {k: results[k] for k in self.spec.REPORTED_METRICS}

    def evaluate(self, ctx: JobContext) -> dict[str, float]:
        """Accuracy and mean loss on dev_file, every example counted exactly once, in one
        device loop over the padded dev records."""
        totals = ctx.evaluate_sums(self.eval_dataset, self.eval_sums,
                                      ("correct", "loss", "count"), self.dev_batches)
        count = max(totals["count"], 1.0)
        return {"eval_accuracy": totals["correct"] / count, "eval_loss": totals["loss"] / count,
                "eval_examples": totals["count"], "global_step": float(ctx.step)}

    def eval_dataset(self, ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return data.host_batches(data.in_order([self.dev_file]), ctx, self.eval_batch, self.parse)

    def eval_sums(self, model, batch) -> dict:
        logits = model(batch, training=False)["logits"]
        w = batch["weight"]
        loss = cross_entropy(batch["label"], logits)
        return {"correct": ops.sum(correct(logits, batch["label"]) * w),
                "loss": ops.sum(loss * w), "count": ops.sum(w)}

    # ---------------------------------------------------------------------------------------
    # Prediction and export

    def predict(self, ctx: JobContext) -> np.ndarray:
        """Label probabilities [test examples, labels] (float32), one row per line of test_file,
        in file order: the padded batches run in one device loop; padding rows (index -1) are
        dropped and every line must come back exactly once."""
        index, probabilities = ctx.predict_rows(self.test_dataset, self.test_outputs,
                                                   (tf.int32, tf.float32), self.test_batches)
        keep = index >= 0
        index, probabilities = index[keep], probabilities[keep]
        if sorted(index.tolist()) != list(range(self.test_examples)):
            raise RuntimeError(f"prediction returned {len(index)} rows for "
                               f"{self.test_examples} test examples")
        out = np.empty_like(probabilities)
        out[index] = probabilities
        return out

    def test_dataset(self, ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return data.host_batches(data.in_order([self.test_file]), ctx, self.predict_batch,
                                 self.parse)

    def test_outputs(self, model, batch):
        logits = model(batch, training=False)["logits"]
        return batch["index"], ops.softmax(ops.cast(logits, "float32"), axis=-1)

    def write_predictions(self, ctx: JobContext) -> None:
        """test_file's predictions by the model as it is now (:func:`write_outputs`)."""
        probabilities = self.predict(ctx)
        write_outputs(ctx.out_dir, probabilities, self.labels)
        self.outputs += [TEST_RESULTS, PREDICTIONS]
        log(f"{len(probabilities)} predictions of {self.spec.test_file}: "
            f"{ctx.out_dir}/{TEST_RESULTS}, {PREDICTIONS}")

    def export(self, ctx: JobContext) -> None:
        from . import serving
        from .export_layout import CLASSIFIER, SAVED_MODEL_DIR

        s = self.spec
        path = serving.export(
            f"{ctx.out_dir}/{SAVED_MODEL_DIR}", CLASSIFIER, self.build_model,
            weights.values_of(ctx.variables), s.bert_dir,
            {"do_lower_case": s.do_lower_case, "max_seq_length": s.max_seq_length,
             "text_b": self.pair},
            labels=self.labels)
        self.outputs.append(f"{SAVED_MODEL_DIR}/")
        log(f"SavedModel for serving: {path}")
