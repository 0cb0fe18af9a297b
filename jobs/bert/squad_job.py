"""``bert-squad``: span-extraction fine-tuning on SQuAD v1.1/v2.0, as run_squad.py, on the runner.

The training file becomes features (:mod:`jobs.bert.squad`: windows, positions) written once per
start to TFRecord shards in ``<model_dir>/squad_data`` (deterministically, so a restart writes
the same bytes) and read through the epoch stream of :mod:`jobs.data`: a resumed run continues
with the very windows the uninterrupted run would have read. The model is the encoder and a
start/end layer under the original names ``cls/squad/output_weights`` / ``output_bias``, so a
checkpoint fine-tuned by run_squad.py initialises it unchanged (``init_checkpoint``); the loss is
the mean of the start and end cross-entropies.

When training ends the job predicts ``predict_file`` (its windows padded to whole batches of
``predict_batch_size`` rounded up to whole per-replica batches of the slice, in order), decodes the n-best spans and writes ``<model_dir>/predictions.json`` (question id ->
answer text), ``nbest_predictions.json``, ``null_odds.json`` (v2.0) and ``eval_results.json``
with the official ``exact_match`` and ``f1`` (percent), which also go to progress.json (also
computed every ``eval_every_steps``, without the files); and it
exports ``<model_dir>/export``, an original-layout directory whose checkpoint holds ``bert/*`` and
``cls/squad/*`` under the original names.
"""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf
from keras import ops

from .. import data
from ..errors import ConfigError
from ..job import JobContext, log
from . import check_case, read_config, squad, weights
from .classifier import pad_to_batches
from .job import BertJob
from .modeling import SquadModel, cross_entropy
from .spec import SquadSpec
from .tokenization import FullTokenizer

DATA_DIR = "squad_data"
EXPORT_DIR = "export"


def feature_arrays(features: list[squad.Feature]) -> dict[str, np.ndarray]:
    return {"token_ids": np.array([f.input_ids for f in features], np.int32),
            "segment_ids": np.array([f.segment_ids for f in features], np.int32),
            "padding_mask": np.array([f.input_mask for f in features], np.int32),
            "start_positions": np.array([f.start_position for f in features], np.int32),
            "end_positions": np.array([f.end_position for f in features], np.int32),
            "feature_index": np.arange(len(features), dtype=np.int32),
            "label": np.zeros(len(features), np.int32),
            "weight": np.ones(len(features), np.float32)}


class SquadJob(BertJob):
    metric_names = ()

    def __init__(self, spec: SquadSpec):
        super().__init__(spec)
        self.spec: SquadSpec = spec
        self.gold = None          # predict_file's JSON, once read

    def _features(self, path: str, training: bool):
        s = self.spec
        try:
            examples = squad.read_examples(path, training, s.version_2_with_negative, warn=log)
            features = squad.convert_to_features(examples, self.tokenizer, s.max_seq_length,
                                                 s.doc_stride, s.max_query_length, training)
        except squad.SquadError as exc:
            raise ConfigError(str(exc)) from None
        if not features:
            raise ConfigError(f"{path} gives no usable questions; check the file")
        return examples, features

    def prepare(self, ctx: JobContext) -> None:
        s = self.spec
        self.config = read_config(s.bert_dir)
        if s.max_seq_length > self.config.max_position_embeddings:
            raise ConfigError(f"max_seq_length {s.max_seq_length} exceeds "
                              f"max_position_embeddings {self.config.max_position_embeddings}; "
                              f"use --set max_seq_length={self.config.max_position_embeddings}")
        check_case(s)
        self.tokenizer = FullTokenizer(f"{s.bert_dir.rstrip('/')}/vocab.txt", s.do_lower_case)
        out_dir = f"{ctx.out_dir}/{DATA_DIR}"
        tf.io.gfile.makedirs(out_dir)
        train_examples, train, self.stream = [], [], None
        if s.do_train:
            train_examples, train = self._features(s.train_file, training=True)
            self.stream = data.write_stream(out_dir, feature_arrays(train), len(train), s.seed,
                                            log)
        else:  # predict only: the checkpoint must hold the span head
            weights.fine_tuned_checkpoint(ctx.model_dir, s.resolved_init_checkpoint,
                                          "cls/squad/output_weights", "bert-squad")
        n = len(train)
        self.predict_records = None
        if s.predict_file:
            self.predict_examples, self.predict_features = self._features(s.predict_file, False)
            self.predict_batch = ctx.fitted_batch(s.predict_batch_size)
            padded = pad_to_batches(feature_arrays(self.predict_features), self.predict_batch)
            padded["feature_index"][len(self.predict_features):] = -1
            self.predict_records = f"{out_dir}/predict.tfrecord"
            data.write_records(self.predict_records, padded, range(len(padded["weight"])))
            self.predict_batches = len(padded["weight"]) // self.predict_batch
        log((f"{len(train_examples)} training questions, {n} windows "
             f"({n / s.train_batch_size:.1f} steps per epoch)" if s.do_train else "predict only")
            + (f"; {len(self.predict_examples)} questions to predict" if s.predict_file else ""))

    def parse(self, records):
        n = self.spec.max_seq_length
        schema = {"token_ids": tf.io.FixedLenFeature([n], tf.int64),
                  "segment_ids": tf.io.FixedLenFeature([n], tf.int64),
                  "padding_mask": tf.io.FixedLenFeature([n], tf.int64),
                  "start_positions": tf.io.FixedLenFeature([], tf.int64),
                  "end_positions": tf.io.FixedLenFeature([], tf.int64),
                  "feature_index": tf.io.FixedLenFeature([], tf.int64)}
        ex = tf.io.parse_example(records, schema)
        return {k: tf.cast(v, tf.int32) for k, v in ex.items()}

    def dataset(self, ctx: tf.distribute.InputContext, position: int) -> tf.data.Dataset:
        return data.stream_batches(self.stream, position, ctx, self.spec.train_batch_size,
                                   self.parse)

    def build_model(self):
        return SquadModel(self.config)

    def loss_counts(self, features):
        return {"examples": ops.cast(ops.shape(features["start_positions"])[0], "float32")}

    def loss(self, model, features, training: bool, seed=None, totals=None):
        """The mean of the start and end cross-entropies over the global batch (this replica's
        share). keras.ops: traced on either backend."""
        examples = (totals or self.loss_counts(features))["examples"]
        out = model(features, training=training, seed=seed)
        start = cross_entropy(features["start_positions"], out["start_logits"])
        end = cross_entropy(features["end_positions"], out["end_logits"])
        return (ops.sum(start) + ops.sum(end)) / (2.0 * examples), {}

    def init_variables(self, variables):
        # The encoder must be there; cls/squad/* loads too when the checkpoint has it (a model
        # fine-tuned by run_squad.py), else the head starts fresh; predict-only needs it.
        if not self.spec.do_train:
            return variables, lambda name: not name.startswith("bert/pooler/")
        return variables, lambda name: name.startswith("bert/")

    def trainable(self, name: str) -> bool:
        return not name.startswith("bert/pooler/")   # run_squad.py never reaches the pooler

    # ---------------------------------------------------------------------------------------
    # Prediction and the official evaluation

    def logits(self, ctx: JobContext) -> dict[int, tuple[list[float], list[float]]]:
        """unique_id -> (start logits, end logits) for every window of predict_file, computed by
        the runner's prediction loop (:attr:`JobContext.predict_rows`: one device loop, each
        global batch gathered across replicas and hosts, compiled once and reused by every
        evaluation)."""
        indices, starts, ends = ctx.predict_rows(self.predict_dataset, self.predict_outputs,
                                                 (tf.int32, tf.float32, tf.float32),
                                                 self.predict_batches)
        found: dict[int, tuple[list[float], list[float]]] = {}
        for k, start, end in zip(indices, starts, ends):
            if k >= 0:
                found[self.predict_features[int(k)].unique_id] = (start.tolist(), end.tolist())
        if len(found) != len(self.predict_features):
            raise RuntimeError(f"prediction covered {len(found)} of "
                               f"{len(self.predict_features)} windows")
        return found

    def predict_dataset(self, ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return data.host_batches(data.in_order([self.predict_records]), ctx, self.predict_batch,
                                 self.parse)

    def predict_outputs(self, model, batch):
        """Each window's index (-1 for padding) and its start and end logits (float32)."""
        out = model(batch, training=False)
        return batch["feature_index"], out["start_logits"], out["end_logits"]

    def export(self, ctx: JobContext) -> None:
        """``<model_dir>/export``: an original-layout directory (bert_config.json, vocab.txt,
        bert_model.ckpt with ``bert/*`` and ``cls/squad/*``), as run_squad.py's checkpoints;
        and ``<model_dir>/saved_model`` for serving (:mod:`jobs.bert.serving`)."""
        export = f"{ctx.out_dir}/{EXPORT_DIR}"
        tf.io.gfile.makedirs(export)
        weights.write(f"{export}/bert_model.ckpt", weights.values_of(ctx.variables))
        for name in ("bert_config.json", "vocab.txt"):
            tf.io.gfile.copy(f"{self.spec.bert_dir.rstrip('/')}/{name}", f"{export}/{name}",
                             overwrite=True)
        from . import serving
        from .export_layout import SAVED_MODEL_DIR, SQUAD

        s = self.spec
        serving.export(f"{ctx.out_dir}/{SAVED_MODEL_DIR}", SQUAD,
                       self.build_model, weights.values_of(ctx.variables), s.bert_dir,
                       {"do_lower_case": s.do_lower_case, "max_seq_length": s.max_seq_length,
                        "doc_stride": s.doc_stride, "max_query_length": s.max_query_length,
                        "n_best_size": s.n_best_size, "max_answer_length": s.max_answer_length,
                        "version_2_with_negative": s.version_2_with_negative,
                        "null_score_diff_threshold": s.null_score_diff_threshold})

    def predict(self, ctx: JobContext) -> tuple[squad.Prediction, dict[str, float]]:
        """predict_file's answers by the model as it is now, and the official metrics."""
        s = self.spec
        prediction = squad.predict(self.predict_examples, self.predict_features, self.logits(ctx),
                                   s.n_best_size, s.max_answer_length, s.do_lower_case,
                                   s.version_2_with_negative, s.null_score_diff_threshold)
        if self.gold is None:
            self.gold = squad.load_json(s.predict_file)
        return prediction, squad.evaluate(self.gold, prediction.answers)

    def eval_metrics(self, ctx: JobContext) -> dict[str, float]:
        if self.predict_records is None:
            return {}
        results = self.predict(ctx)[1]
        return {k: results[k] for k in self.spec.REPORTED_METRICS}

    def finish(self, ctx: JobContext) -> dict[str, float]:
        self.export(ctx)
        self.outputs += [f"{EXPORT_DIR}/", "saved_model/"]
        if self.predict_records is None:
            return {}
        s = self.spec
        prediction, results = self.predict(ctx)
        model_dir = ctx.out_dir
        outputs = {"predictions.json": prediction.answers,
                   "nbest_predictions.json": prediction.nbest}
        if s.version_2_with_negative:
            outputs["null_odds.json"] = prediction.null_odds
        for name, value in outputs.items():
            with tf.io.gfile.GFile(f"{model_dir}/{name}", "w") as f:
                f.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
        results["global_step"] = float(ctx.step)
        with tf.io.gfile.GFile(f"{model_dir}/eval_results.json", "w") as f:
            f.write(json.dumps(results, indent=2, sort_keys=True) + "\n")
        self.outputs += [*outputs, "eval_results.json"]
        log(f"SQuAD {s.predict_file}: exact_match {results['exact_match']:.2f}, "
            f"f1 {results['f1']:.2f}")
        return {k: results[k] for k in s.REPORTED_METRICS}
