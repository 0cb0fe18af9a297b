"""``bert-pretrain``: masked-LM + next-sentence pretraining, as run_pretraining.py.

Input: TFRecord shards with the original features (``input_ids``, ``input_mask``,
``segment_ids``, ``masked_lm_positions``, ``masked_lm_ids``, ``masked_lm_weights``,
``next_sentence_labels``), written by create_pretraining_data.py or by
:mod:`jobs.pretraining.create` -- or a text corpus that the job turns into shards first.
The shards are read as one epoch stream (:mod:`jobs.data`): step N trains on the same examples
whether or not the run was interrupted before it.

Loss: masked-LM cross-entropy averaged over the real (weight 1) predictions of the global
batch, plus the next-sentence cross-entropy averaged over the global batch (whatever the number
of replicas; run_pretraining.py normalised per TPU core). The heads use the original variables
(``cls/predictions/*``, ``cls/seq_relationship/*``), so an original checkpoint continues training
with its heads, and at the end the run exports an original-layout BERT directory
(``<model_dir>/export``) that ``load_encoder``, ``bert-finetune`` and google-research's own
scripts read. Evaluation (every ``eval_every_steps`` and at the end) is run_pretraining.py's
``do_eval``: masked-LM and next-sentence accuracy and loss on a fixed slice of the data.
"""

from __future__ import annotations

import tensorflow as tf
from keras import ops

from .. import data
from ..errors import ConfigError
from ..job import JobContext, log
from ..pretraining.create import DataOptions, create, expand_globs
from . import check_case, read_config, weights
from .job import BertJob
from .modeling import PretrainingModel, correct, cross_entropy
from .spec import PretrainSpec
from .tokenization import FullTokenizer

EXPORT_DIR = "export"
DATA_DIR = "pretraining_data"
CORPUS_WARN_BYTES = 20_000_000  # ~4.6 GB of instances in memory at dupe_factor 10 (measured 926 MB per 4 MB)
EVAL_SUMS = ("mlm_correct", "mlm_loss", "mlm_weight", "nsp_correct", "nsp_loss", "count")


class PretrainJob(BertJob):
    metric_names = ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")

    def __init__(self, spec: PretrainSpec):
        super().__init__(spec)
        self.spec: PretrainSpec = spec
        self.files: list[str] = []
        self.stream: data.EpochStream | None = None

    # -- data ---------------------------------------------------------------------------------
    def prepare(self, ctx: JobContext) -> None:
        self.config = read_config(self.spec.bert_dir)
        if self.spec.max_seq_length > self.config.max_position_embeddings:
            raise ConfigError(f"max_seq_length {self.spec.max_seq_length} exceeds "
                              f"max_position_embeddings {self.config.max_position_embeddings}")
        check_case(self.spec)
        if self.spec.corpus_files:
            self.files = self._create_data(ctx)
        else:
            self.files = expand_globs(self.spec.input_files)
            if not self.files:
                raise ConfigError(f"input_files {self.spec.input_files} matches no file; check "
                                  "the path (--set input_files=...)")
        self._check_record_shapes(self.files[0])
        index = data.build_index(self.files, f"{ctx.out_dir}/{data.INDEX_NAME}", log)
        self.stream = data.EpochStream(index, self.spec.seed)
        log(f"{index.total} pretraining examples in {len(self.files)} file(s): "
            f"{index.total / self.spec.train_batch_size:.1f} steps per epoch")

    def _create_data(self, ctx: JobContext) -> list[str]:
        """Shards from the corpus into <model_dir>/pretraining_data, once: a DONE marker makes
        a resumed run reuse them (and a run cut during creation start it again)."""
        s = self.spec
        out_dir = f"{ctx.out_dir}/{DATA_DIR}"
        done = f"{out_dir}/DONE"
        files = [f"{out_dir}/pretraining-{i:05d}-of-{s.num_shards:05d}.tfrecord"
                 for i in range(s.num_shards)]
        if tf.io.gfile.exists(done):
            return files
        corpus = expand_globs(s.corpus_files)
        if not corpus:
            raise ConfigError(f"corpus_files {s.corpus_files} matches no file")
        corpus_bytes = sum(int(tf.io.gfile.stat(f).length) for f in corpus)
        if corpus_bytes > CORPUS_WARN_BYTES:
            log(f"warning: corpus_files holds {corpus_bytes / 1e6:.0f} MB: creating its data here "
                "holds every instance in memory on one core while the TPU bills; make the shards "
                f"first with `tpuctl data {' '.join(corpus)} --bert-dir {s.bert_dir} --out "
                "gs://BUCKET/data/NAME` and train with --set input_files=<the glob it prints>")
        tf.io.gfile.makedirs(out_dir)
        opts = DataOptions(max_seq_length=s.max_seq_length,
                           max_predictions_per_seq=s.max_predictions_per_seq,
                           masked_lm_prob=s.masked_lm_prob, dupe_factor=s.dupe_factor,
                           short_seq_prob=s.short_seq_prob, do_whole_word_mask=s.do_whole_word_mask,
                           random_seed=s.seed)
        tokenizer = FullTokenizer(f"{s.bert_dir.rstrip('/')}/vocab.txt", s.do_lower_case)
        log(f"creating pretraining data from {len(corpus)} file(s) into {out_dir}")
        # progress.json says when: `tpuctl cost` counts this billed time apart from training
        with ctx.making_data():
            try:
                count = create(corpus, files, tokenizer, opts)
            except ValueError as exc:
                raise ConfigError(f"{exc}; corpus_files needs one sentence per line, documents "
                                  "separated by blank lines") from None
        with tf.io.gfile.GFile(done, "w") as f:
            f.write(f"{count}\n")
        log(f"wrote {count} pretraining examples")
        return files

    def _check_record_shapes(self, path: str) -> None:
        """One record read eagerly: a shard of another seq length fails here in one line,
        not as a shape error deep inside the first TPU step."""
        s = self.spec
        for raw in tf.data.TFRecordDataset(path).take(1):
            example = tf.train.Example.FromString(raw.numpy())
            feats = example.features.feature
            have = {k: len(feats[k].int64_list.value) or len(feats[k].float_list.value)
                    for k in ("input_ids", "masked_lm_positions") if k in feats}
            if have.get("input_ids") != s.max_seq_length or \
                    have.get("masked_lm_positions") != s.max_predictions_per_seq:
                raise ConfigError(
                    f"{path} holds sequences of {have.get('input_ids')} tokens with "
                    f"{have.get('masked_lm_positions')} predictions but the spec says "
                    f"max_seq_length {s.max_seq_length}, max_predictions_per_seq "
                    f"{s.max_predictions_per_seq}; set them to match the data")
            return
        raise ConfigError(f"{path} has no examples; recreate the pretraining data")

    def schema(self) -> dict:
        s = self.spec
        n, p = s.max_seq_length, s.max_predictions_per_seq
        return {
            "input_ids": tf.io.FixedLenFeature([n], tf.int64),
            "input_mask": tf.io.FixedLenFeature([n], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([n], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([p], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([p], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([p], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
        }

    def parse(self, records):
        ex = tf.io.parse_example(records, self.schema())
        # TPUs want int32; names follow the encoder's inputs.
        return {"token_ids": tf.cast(ex["input_ids"], tf.int32),
                "padding_mask": tf.cast(ex["input_mask"], tf.int32),
                "segment_ids": tf.cast(ex["segment_ids"], tf.int32),
                "masked_lm_positions": tf.cast(ex["masked_lm_positions"], tf.int32),
                "masked_lm_ids": tf.cast(ex["masked_lm_ids"], tf.int32),
                "masked_lm_weights": ex["masked_lm_weights"],
                "next_sentence_labels": tf.cast(ex["next_sentence_labels"][:, 0], tf.int32)}

    def dataset(self, ctx: tf.distribute.InputContext, position: int) -> tf.data.Dataset:
        return data.stream_batches(self.stream, position, ctx, self.spec.train_batch_size,
                                   self.parse)

    # -- model and loss -----------------------------------------------------------------------
    def build_model(self):
        return PretrainingModel(self.config)

    def loss_counts(self, features):
        return {"examples": ops.cast(ops.shape(features["next_sentence_labels"])[0], "float32"),
                "masked_lm_weight": ops.sum(features["masked_lm_weights"])}

    def loss(self, model, features, training: bool, seed=None, totals=None):
        out = model(features, training=training, seed=seed)
        return pretraining_loss(out, features, totals or self.loss_counts(features))

    def init_variables(self, variables):
        # An original checkpoint has the heads; one exported by bert-finetune does not: then the
        # heads start fresh, the encoder must be there.
        return variables, lambda name: name.startswith("bert/")

    # -- end ----------------------------------------------------------------------------------
    def finish(self, ctx: JobContext) -> dict[str, float]:
        metrics = self.eval_metrics(ctx)
        if not self.spec.export_bert_dir:
            return metrics
        export = f"{ctx.out_dir}/{EXPORT_DIR}"
        tf.io.gfile.makedirs(export)
        encoder_and_heads = weights.values_of(ctx.variables)
        weights.write(f"{export}/bert_model.ckpt", encoder_and_heads)
        for name in ("bert_config.json", "vocab.txt"):
            tf.io.gfile.copy(f"{self.spec.bert_dir.rstrip('/')}/{name}", f"{export}/{name}",
                             overwrite=True)
        log(f"exported an original-layout BERT directory to {export}")
        return metrics

    # -- evaluation ---------------------------------------------------------------------------
    def eval_metrics(self, ctx: JobContext) -> dict[str, float]:
        """run_pretraining.py's do_eval: masked-LM and next-sentence accuracy and loss on a
        fixed slice of the data, the first ``max_eval_steps`` x ``eval_batch_size`` examples in
        file order (pretraining data has no held-out split), padded with blank examples to whole
        batches of the slice (:meth:`Runner.fitted_batch`); the same slice at every step, so
        the numbers are comparable along the run and across a sweep's trials."""
        batch = ctx.fitted_batch(self.spec.eval_batch_size)
        examples = self.eval_batches() * self.spec.eval_batch_size
        blank = data.blank_record(self.schema())

        def dataset(input_ctx):  # repeat: data smaller than one batch still fills it (static shapes)
            records = data.padded(data.in_order(self.files).repeat(), examples, batch, blank)
            return data.host_batches(records, input_ctx, batch, self.parse)

        totals = ctx.evaluate_sums(dataset, self.eval_sums, EVAL_SUMS, -(-examples // batch))
        predictions, examples = max(totals["mlm_weight"], 1e-5), max(totals["count"], 1.0)
        return {"masked_lm_accuracy": totals["mlm_correct"] / predictions,
                "masked_lm_loss": totals["mlm_loss"] / predictions,
                "next_sentence_accuracy": totals["nsp_correct"] / examples,
                "next_sentence_loss": totals["nsp_loss"] / examples}

    def eval_batches(self) -> int:
        """``max_eval_steps`` batches, fewer if the data has fewer (at least one)."""
        return max(1, min(self.spec.max_eval_steps,
                          self.stream.index.total // self.spec.eval_batch_size))

    def eval_sums(self, model, batch) -> dict:
        """The sums of one evaluation batch (keras.ops: traced on either backend)."""
        out = model(batch, training=False)
        w = batch["masked_lm_weights"]
        ids, nsp = batch["masked_lm_ids"], batch["next_sentence_labels"]
        mlm_loss = cross_entropy(ids, out["mlm_logits"])
        nsp_loss = cross_entropy(nsp, out["nsp_logits"])

        # padding rows (data.blank_record) have no [CLS]: weight 0
        real = ops.cast(ops.max(batch["padding_mask"], axis=-1) > 0, "float32")

        return {"mlm_correct": ops.sum(correct(out["mlm_logits"], ids) * w),
                "mlm_loss": ops.sum(mlm_loss * w), "mlm_weight": ops.sum(w),
                "nsp_correct": ops.sum(correct(out["nsp_logits"], nsp) * real),
                "nsp_loss": ops.sum(nsp_loss * real), "count": ops.sum(real)}


def pretraining_loss(outputs, features, totals):
    """(total loss, metrics) as run_pretraining.py computes them, but over the global batch:
    these examples' sums divided by ``totals`` (the global batch's ``masked_lm_weight`` and
    ``examples``), so the replicas' results add up to the global means (on JAX the step sees the
    global batch at once: the sums are the global ones). run_pretraining.py divided each TPU
    core's masked-LM sum by that core's own weights instead (``--set
    loss_normalization=replica``). keras.ops: traced on either backend."""
    labels = features["masked_lm_ids"]
    weights_ = features["masked_lm_weights"]
    logits = outputs["mlm_logits"]
    per_prediction = cross_entropy(labels, logits)
    denominator = totals["masked_lm_weight"] + 1e-5
    mlm_loss = ops.sum(per_prediction * weights_) / denominator
    mlm_accuracy = ops.sum(correct(logits, labels) * weights_) / denominator

    nsp_labels = features["next_sentence_labels"]
    nsp_logits = outputs["nsp_logits"]
    examples = totals["examples"]
    nsp_loss = ops.sum(cross_entropy(nsp_labels, nsp_logits)) / examples
    nsp_accuracy = ops.sum(correct(nsp_logits, nsp_labels)) / examples
    return mlm_loss + nsp_loss, {"mlm_loss": mlm_loss, "mlm_accuracy": mlm_accuracy,
                                 "nsp_loss": nsp_loss, "nsp_accuracy": nsp_accuracy}
