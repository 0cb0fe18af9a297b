"""Named entities with BERT, through the public ``job: keras`` API (docs/own-code.md).

Token classification as in the BERT paper's CoNLL-2003 experiment: an original google-research
BERT checkpoint (``jobs.bert.load_encoder``) continued with a linear layer over its sequence
output, one tag per word read at the word's first word piece, written with ``keras.ops`` so that
it runs on either backend (only reading the files and the input pipeline are TensorFlow's). Input: CoNLL-style files (a token
per line, its BIO tag in the last column, a blank line between sentences, ``-DOCSTART-`` lines
skipped). Reported: the loss, word accuracy and entity-level precision, recall and F1 as seqeval
defines them (an entity is its type, first and last word; it counts when the predicted entity is
exactly the gold one), computed in the graph on every slice (:func:`entity_counts`), so the
runner's global sums make them exact over the whole eval set.

params: ``bert_dir`` (the BERT directory), ``train_file``/``eval_file`` (CoNLL; relative to this
file's directory), ``entity_types`` (the tags are ``O`` then ``B-``/``I-`` of each type, in this
order: tag id ``2t - 1`` is ``B-`` of type t, ``2t`` its ``I-``), ``max_seq_length``,
``do_lower_case``. Words past ``max_seq_length`` word pieces are not tagged. The encoder runs
without dropout, so a run resumes exactly and trains the same on any slice.
"""

import functools
import os

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from jobs.bert import load_encoder
from jobs.bert.tokenization import FullTokenizer
from jobs.keras.inputs import eval_batches, train_batches

HERE = os.path.dirname(os.path.abspath(__file__))


def tag_names(entity_types):
    return ["O"] + [f"{prefix}-{kind}" for kind in entity_types for prefix in ("B", "I")]


def read_conll(path):
    """[(words, tags)] of a CoNLL-style file."""
    sentences, words, tags = [], [], []
    with tf.io.gfile.GFile(path) as f:
        for line in [*f.read().splitlines(), ""]:
            parts = line.split()
            if parts and parts[0] != "-DOCSTART-":
                words.append(parts[0])
                tags.append(parts[-1])
            elif not parts and words:
                sentences.append((words, tags))
                words, tags = [], []
    return sentences


def encode(sentences, tokenizer, names, max_seq_length):
    """Features (token_ids, segment_ids, padding_mask) and labels (tags: the tag id at each
    word's first piece, mask: 1 there) of ``sentences``, [n, max_seq_length] each."""
    index = {name: i for i, name in enumerate(names)}
    n = len(sentences)
    ids = np.zeros((n, max_seq_length), np.int32)
    tags = np.zeros((n, max_seq_length), np.int32)
    mask = np.zeros((n, max_seq_length), np.float32)
    for row, (words, word_tags) in enumerate(sentences):
        tokens, at = ["[CLS]"], []
        for word, tag in zip(words, word_tags):
            if tag not in index:
                raise ValueError(f"tag {tag!r} is not one of {', '.join(names)}: add its type to "
                                 "params.entity_types")
            pieces = tokenizer.tokenize(word)
            if len(tokens) + len(pieces) > max_seq_length - 1:
                break
            at.append((len(tokens), index[tag]))
            tokens += pieces
        tokens.append("[SEP]")
        ids[row, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
        for position, tag in at:
            tags[row, position], mask[row, position] = tag, 1.0
    features = {"token_ids": ids, "segment_ids": np.zeros_like(ids),
                "padding_mask": (ids > 0).astype(np.int32)}
    return features, {"tags": tags, "mask": mask}


@functools.lru_cache(maxsize=8)
def examples(path, bert_dir, entity_types, max_seq_length, do_lower_case):
    tokenizer = FullTokenizer(f"{bert_dir.rstrip('/')}/vocab.txt", do_lower_case)
    path = path if os.path.isabs(path) or "://" in path else os.path.join(HERE, path)
    return encode(read_conll(path), tokenizer, tag_names(entity_types), max_seq_length)


class Tagger(keras.Model):
    """BERT's sequence output, then a linear layer to the tags."""

    def __init__(self, encoder, num_tags):
        super().__init__(name="tagger")
        self.encoder = encoder
        self.classifier = keras.layers.Dense(
            num_tags, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="classifier")

    def call(self, features, training=False):
        sequence = self.encoder(features, training=False)["sequence_output"]
        return self.classifier(sequence)


def model(params):
    if not params.get("bert_dir"):
        raise ValueError("params.bert_dir is not set: --set params.bert_dir=DIR (an original "
                         "BERT directory)")
    return Tagger(load_encoder(params["bert_dir"]), len(tag_names(params["entity_types"])))


def dataset(params, split, context):
    path = params["train_file"] if split == "train" else params["eval_file"]
    data = examples(path, params["bert_dir"], tuple(params["entity_types"]),
                    params["max_seq_length"], params["do_lower_case"])
    if split == "train":
        return train_batches(data, params, context)
    return eval_batches(data, params, context)


def loss(labels, outputs):
    """Each sentence's mean cross-entropy over its words."""
    per_piece = keras.losses.sparse_categorical_crossentropy(
        labels["tags"], ops.cast(outputs, "float32"), from_logits=True)
    mask = labels["mask"]
    return ops.sum(per_piece * mask, -1) / ops.maximum(ops.sum(mask, -1), 1.0)


def metrics(labels, outputs):
    predicted = ops.cast(ops.argmax(outputs, -1), "int32")
    mask = labels["mask"]
    right = ops.cast(ops.equal(predicted, labels["tags"]), "float32") * mask
    tp, found, gold = entity_counts(labels["tags"], predicted, mask)
    return {"accuracy": (ops.sum(right, -1), ops.sum(mask, -1)),
            "precision": (tp, found), "recall": (tp, gold), "f1": (2.0 * tp, found + gold)}


def predict(outputs):
    return {"tags": ops.cast(ops.argmax(outputs, -1), "int32")}


def chunks(tags, mask):
    """Where entities start and continue in each row of word tags, as seqeval reads BIO: an
    entity starts at B-, or at an I- after O or after another type; it continues over the I-
    of its type. Returns (start, continues, type) [batch, words]."""
    mask = ops.cast(mask, "int32")
    kind = ops.where(tags == 0, 0, 2 - tags % 2) * mask         # 0: O, 1: B-, 2: I-
    kind_type = (tags + 1) // 2 * mask
    before = [[0, 0], [1, 0]]
    prev_kind, prev_type = ops.pad(kind[:, :-1], before), ops.pad(kind_type[:, :-1], before)
    start = (kind == 1) | ((kind == 2) & ((prev_kind == 0) | (prev_type != kind_type)))
    continues = (kind == 2) & (prev_kind != 0) & (prev_type == kind_type)
    return start, continues, kind_type


def entity_counts(gold, predicted, mask):
    """Per sentence: (entities predicted exactly, entities predicted, gold entities), float32
    [batch], over the words (the pieces where ``mask`` is 1)."""
    # the words first, in order (a stable sort: the pieces where mask is 1 before the others)
    order = ops.argsort(-ops.cast(mask, "int32"), axis=-1)
    gold = ops.take_along_axis(ops.cast(gold, "int32"), order, axis=1)
    predicted = ops.take_along_axis(ops.cast(predicted, "int32"), order, axis=1)
    mask = ops.take_along_axis(ops.convert_to_tensor(mask), order, axis=1)
    g_start, g_cont, g_type = chunks(gold, mask)
    p_start, p_cont, p_type = chunks(predicted, mask)
    after = [[0, 0], [0, 1]]
    inside = g_start | g_cont
    last = inside & ~ops.pad(g_cont[:, 1:], after)                 # a gold entity's last word
    agree = (g_start == p_start) & (g_cont == p_cont) & (g_type == p_type)
    wrong = inside & ~(agree & ~(last & ops.pad(p_cont[:, 1:], after)))
    rows, width = ops.shape(gold)[0], ops.shape(gold)[1]
    entity = ops.cumsum(ops.cast(g_start, "int32"), axis=1) * ops.cast(inside, "int32")
    segments = entity + ops.arange(rows, dtype="int32")[:, None] * (width + 1)
    missed = ops.segment_max(ops.reshape(ops.cast(wrong, "int32"), [-1]),
                             ops.reshape(segments, [-1]), num_segments=rows * (width + 1))
    missed = ops.sum(ops.reshape(ops.maximum(missed, 0), [rows, width + 1])[:, 1:], axis=1)
    gold_count = ops.sum(ops.cast(g_start, "int32"), axis=1)
    found = ops.sum(ops.cast(p_start, "int32"), axis=1)
    return (ops.cast(gold_count - missed, "float32"), ops.cast(found, "float32"),
            ops.cast(gold_count, "float32"))
