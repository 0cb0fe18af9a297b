"""The BERT encoder and its heads, as one readable page of math (after google-research/bert).

Each layer keeps the variables of the original TF1 graph, with the same shapes, and says under
which original name each one lives (``original_variables``): that table is how original
checkpoints load, how our checkpoints are keyed (so they stay readable across Keras versions),
and how AdamW decides which variables get weight decay.

Numerics follow the original exactly: erf GELU for ``hidden_act: gelu``, LayerNorm epsilon 1e-12,
attention logits scaled by 1/sqrt(head size) with -10000 added at padded positions, the pooler
a tanh dense layer on the first token. Dense kernels are [in, out] as in TF1.

The layers are plain Keras 3 layers (the Keras every TensorFlow 2.16-2.21 ships) written in
``keras.ops``, so the same code runs on the TensorFlow and the JAX backend (traced by
``tf.function`` or ``jax.jit``); the few primitives ``keras.ops`` cannot state alike on both
(dropout's randomness, a product with a transposed operand) come from :mod:`jobs.backend_ops`.
They compute in the global mixed-precision policy's dtype; softmax, the output biases and losses
always run in float32 (eagerly as in a traced step).

Dropout is stateless: a model called with ``seed`` folds in a fixed number per dropout site
(:func:`jobs.backend_ops.fold`) and draws each site's mask from it. On TensorFlow the seed is
int64 ``[key0, key1, first_example]`` (the runner derives the key from the spec's seed and the
step, and ``first_example`` is where this replica's batch starts in the global batch) and each
site's mask is a slice of one Philox stream over the whole global batch, read from this
replica's offset; on JAX it is a threefry key and the mask is drawn over the global batch
itself, sharding-invariantly. Either way the masks of step N are the same whether or not the
run was interrupted before it, and whether the global batch is split over 1 replica, 8 TPU
cores or 4 hosts.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from .. import backend_ops
from ..backend_ops import fold
from .config import BertConfig

LAYER_NORM_EPSILON = 1e-12


def gelu(x):
    """Exact GELU, x * Phi(x), with the Gaussian CDF through erf."""
    return 0.5 * x * (1.0 + ops.erf(x / ops.cast(math.sqrt(2.0), x.dtype)))


def gelu_tanh(x):
    """The tanh approximation of GELU (google-research/bert since Feb 2019, keras-hub)."""
    c = ops.cast(math.sqrt(2.0 / math.pi), x.dtype)
    return 0.5 * x * (1.0 + ops.tanh(c * (x + 0.044715 * x * x * x)))


def activation(name: str):
    return {"gelu": gelu, "gelu_tanh": gelu_tanh, "gelu_new": gelu_tanh,
            "relu": ops.relu, "tanh": ops.tanh}[name]


class Dropout(keras.layers.Layer):
    """Dropout without RNG state, keyed by ``seed`` (:mod:`jobs.backend_ops`): no Keras
    seed-state variable to keep in sync across replicas or to checkpoint, and the same masks on
    any number of replicas. Without a seed (eager experiments) it is the backend's own dropout."""

    def __init__(self, rate: float, **kwargs):
        super().__init__(**kwargs)
        self.rate = float(rate)

    def call(self, x, training=False, seed=None):
        if not training or self.rate <= 0.0:
            return x
        if seed is None:
            return backend_ops.unseeded_dropout(x, self.rate)
        keep = ops.cast(backend_ops.uniform_like(x, seed) >= self.rate, x.dtype)
        return x * keep * ops.cast(1.0 / (1.0 - self.rate), x.dtype)


def _init(config: BertConfig) -> keras.initializers.Initializer:
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _dense(units: int, config: BertConfig, name: str, act=None) -> keras.layers.Dense:
    return keras.layers.Dense(units, activation=act, kernel_initializer=_init(config), name=name)


def _layer_norm(name: str) -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name=name)


def _dense_vars(prefix: str, layer: keras.layers.Dense) -> dict:
    return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _norm_vars(prefix: str, layer: keras.layers.LayerNormalization) -> dict:
    return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


class Embeddings(keras.layers.Layer):
    """word + token type + position embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.layer_norm = _layer_norm("LayerNorm")
        self.dropout = Dropout(config.hidden_dropout_prob)

    def build(self, input_shape=None):
        c = self.config
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(c.vocab_size, c.hidden_size), initializer=_init(c))
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(c.type_vocab_size, c.hidden_size),
            initializer=_init(c))
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(c.max_position_embeddings, c.hidden_size),
            initializer=_init(c))
        self.layer_norm.build((None, None, c.hidden_size))
        self.built = True

    def call(self, token_ids, segment_ids, training=False, seed=None):
        dtype = self.compute_dtype
        seq_length = ops.shape(token_ids)[1]
        x = ops.take(ops.cast(self.word_embeddings, dtype), token_ids, axis=0)
        x += ops.take(ops.cast(self.token_type_embeddings, dtype), segment_ids, axis=0)
        x += ops.cast(self.position_embeddings, dtype)[None, :seq_length, :]
        return self.dropout(self.layer_norm(x), training=training, seed=seed)

    def original_variables(self, prefix: str = "bert/embeddings") -> dict:
        return {f"{prefix}/word_embeddings": self.word_embeddings,
                f"{prefix}/token_type_embeddings": self.token_type_embeddings,
                f"{prefix}/position_embeddings": self.position_embeddings,
                **_norm_vars(f"{prefix}/LayerNorm", self.layer_norm)}


class TransformerLayer(keras.layers.Layer):
    """One encoder layer: self-attention, then the feed-forward block, each with a residual
    connection and a post-LayerNorm."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        c = self.config = config
        h = c.hidden_size
        self.query = _dense(h, c, "query")
        self.key = _dense(h, c, "key")
        self.value = _dense(h, c, "value")
        self.attention_output = _dense(h, c, "attention_output")
        self.attention_layer_norm = _layer_norm("attention_LayerNorm")
        self.intermediate = _dense(c.intermediate_size, c, "intermediate")
        self.output_dense = _dense(h, c, "output")
        self.output_layer_norm = _layer_norm("output_LayerNorm")
        self.attention_dropout = Dropout(c.attention_probs_dropout_prob)
        self.hidden_dropout = Dropout(c.hidden_dropout_prob)
        self.act = activation(c.hidden_act)

    def build(self, input_shape=None):
        h, i = self.config.hidden_size, self.config.intermediate_size
        for layer in (self.query, self.key, self.value, self.attention_output):
            layer.build((None, None, h))
        self.intermediate.build((None, None, h))
        self.output_dense.build((None, None, i))
        self.attention_layer_norm.build((None, None, h))
        self.output_layer_norm.build((None, None, h))
        self.built = True

    def _heads(self, x, batch, seq):
        """[batch, seq, hidden] -> [batch, heads, seq, head_size]."""
        c = self.config
        x = ops.reshape(x, (batch, seq, c.num_attention_heads, c.head_size))
        return ops.transpose(x, (0, 2, 1, 3))

    def call(self, x, padding_mask, training=False, seed=None):
        batch, seq = ops.shape(x)[0], ops.shape(x)[1]
        # [batch, 1, 1, to_seq], float32: the same additive bias for every head and query.
        # (Built here from the integer mask: Keras would cast a float input to bfloat16.)
        mask = ops.cast(padding_mask, "float32")
        attention_bias = (1.0 - mask[:, None, None, :]) * -10000.0
        q = self._heads(self.query(x), batch, seq)
        k = self._heads(self.key(x), batch, seq)
        v = self._heads(self.value(x), batch, seq)
        # scores[b, n, i, j] = q_i . k_j / sqrt(d); padded keys get -10000 before the softmax.
        scores = backend_ops.matmul_t(q, k) * (1.0 / math.sqrt(self.config.head_size))
        scores = ops.cast(scores, "float32") + attention_bias
        probs = ops.cast(ops.softmax(scores, axis=-1), x.dtype)
        probs = self.attention_dropout(probs, training=training, seed=fold(seed, 1))
        context = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))
        context = ops.reshape(context, (batch, seq, self.config.hidden_size))
        attended = self.attention_layer_norm(
            x + self.hidden_dropout(self.attention_output(context), training=training,
                                    seed=fold(seed, 2)))
        hidden = self.act(self.intermediate(attended))
        return self.output_layer_norm(
            attended + self.hidden_dropout(self.output_dense(hidden), training=training,
                                           seed=fold(seed, 3)))

    def original_variables(self, prefix: str) -> dict:
        return {**_dense_vars(f"{prefix}/attention/self/query", self.query),
                **_dense_vars(f"{prefix}/attention/self/key", self.key),
                **_dense_vars(f"{prefix}/attention/self/value", self.value),
                **_dense_vars(f"{prefix}/attention/output/dense", self.attention_output),
                **_norm_vars(f"{prefix}/attention/output/LayerNorm", self.attention_layer_norm),
                **_dense_vars(f"{prefix}/intermediate/dense", self.intermediate),
                **_dense_vars(f"{prefix}/output/dense", self.output_dense),
                **_norm_vars(f"{prefix}/output/LayerNorm", self.output_layer_norm)}


class BertEncoder(keras.Model):
    """``{"token_ids", "segment_ids", "padding_mask"}`` -> ``{"sequence_output", "pooled_output"}``.

    ``padding_mask`` is 1 for real tokens and 0 for padding (the original ``input_mask``).
    """

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(name=kwargs.pop("name", "bert"), **kwargs)
        self.config = config
        self.embeddings = Embeddings(config, name="embeddings")
        self.transformer_layers = [TransformerLayer(config, name=f"layer_{i}")
                                   for i in range(config.num_hidden_layers)]
        self.pooler = _dense(config.hidden_size, config, "pooler", act="tanh")

    def build(self, input_shape=None):
        self.embeddings.build()
        for layer in self.transformer_layers:
            layer.build()
        self.pooler.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs, training=False, seed=None):
        padding_mask = ops.cast(inputs["padding_mask"], "int32")
        x = self.embeddings(inputs["token_ids"], inputs["segment_ids"], training=training,
                            seed=fold(seed, 0))
        for i, layer in enumerate(self.transformer_layers):
            x = layer(x, padding_mask, training=training, seed=fold(seed, i + 1))
        pooled = self.pooler(x[:, 0, :])
        return {"sequence_output": x, "pooled_output": pooled}

    def original_variables(self) -> dict:
        names = dict(self.embeddings.original_variables())
        for i, layer in enumerate(self.transformer_layers):
            names.update(layer.original_variables(f"bert/encoder/layer_{i}"))
        names.update(_dense_vars("bert/pooler/dense", self.pooler))
        return names


def gather_positions(sequence, positions):
    """``sequence`` [batch, seq, width] at ``positions`` [batch, predictions] ->
    [batch, predictions, width]: one gather from the batch flattened to rows, as
    google-research/bert's ``gather_indexes``."""
    batch, seq = ops.shape(sequence)[0], ops.shape(sequence)[1]
    width = sequence.shape[-1]
    positions = ops.cast(positions, "int32")
    rows = ops.reshape(positions + (ops.arange(batch, dtype="int32") * seq)[:, None], (-1,))
    x = ops.take(ops.reshape(sequence, (-1, width)), rows, axis=0)
    return ops.reshape(x, (batch, -1, width))


class MaskedLMHead(keras.layers.Layer):
    """``cls/predictions``: transform (dense + act + LayerNorm), then logits against the word
    embeddings (tied output weights) plus a per-token bias."""

    def __init__(self, config: BertConfig, word_embeddings, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.word_embeddings = word_embeddings  # the encoder's variable, shared
        self.transform = _dense(config.hidden_size, config, "transform")
        self.layer_norm = _layer_norm("transform_LayerNorm")
        self.act = activation(config.hidden_act)

    def build(self, input_shape=None):
        self.transform.build((None, self.config.hidden_size))
        self.layer_norm.build((None, self.config.hidden_size))
        # autocast=False: added to float32 logits, read as float32 in eager calls too.
        self.output_bias = self.add_weight(name="output_bias", shape=(self.config.vocab_size,),
                                           initializer="zeros", autocast=False)
        self.built = True

    def call(self, sequence_output, positions):
        """Logits [batch, predictions, vocab] (float32) at ``positions`` [batch, predictions]."""
        x = gather_positions(sequence_output, positions)
        x = self.layer_norm(self.act(self.transform(x)))
        logits = backend_ops.matmul_t(x, ops.cast(self.word_embeddings, x.dtype))
        return ops.cast(logits, "float32") + self.output_bias

    def original_variables(self) -> dict:
        return {**_dense_vars("cls/predictions/transform/dense", self.transform),
                **_norm_vars("cls/predictions/transform/LayerNorm", self.layer_norm),
                "cls/predictions/output_bias": self.output_bias}


class OutputLayer(keras.layers.Layer):
    """``logits = x W^T + b`` with W stored [classes, hidden], as the original NSP and
    classifier heads store ``output_weights``."""

    def __init__(self, config: BertConfig, num_classes: int, prefix: str, **kwargs):
        super().__init__(**kwargs)
        self.config, self.num_classes, self.prefix = config, num_classes, prefix

    def build(self, input_shape=None):
        self.output_weights = self.add_weight(
            name="output_weights", shape=(self.num_classes, self.config.hidden_size),
            initializer=_init(self.config))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.num_classes,),
                                           initializer="zeros", autocast=False)
        self.built = True

    def call(self, x):
        logits = backend_ops.matmul_t(x, ops.cast(self.output_weights, x.dtype))
        return ops.cast(logits, "float32") + self.output_bias

    def original_variables(self) -> dict:
        p = f"{self.prefix}/" if self.prefix else ""
        return {f"{p}output_weights": self.output_weights, f"{p}output_bias": self.output_bias}


class PretrainingModel(keras.Model):
    """Encoder + masked-LM head + next-sentence head, as run_pretraining.py lays them out."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(name=kwargs.pop("name", "bert_pretraining"), **kwargs)
        self.config = config
        self.encoder = BertEncoder(config)
        self.encoder.build()
        self.masked_lm = MaskedLMHead(config, self.encoder.embeddings.word_embeddings,
                                      name="predictions")
        self.next_sentence = OutputLayer(config, 2, "cls/seq_relationship", name="seq_relationship")
        self.masked_lm.build()
        self.next_sentence.build()
        self.built = True

    def call(self, features, training=False, seed=None):
        out = self.encoder(features, training=training, seed=fold(seed, 0))
        return {"mlm_logits": self.masked_lm(out["sequence_output"], features["masked_lm_positions"]),
                "nsp_logits": self.next_sentence(out["pooled_output"])}

    def original_variables(self) -> dict:
        return {**self.encoder.original_variables(), **self.masked_lm.original_variables(),
                **self.next_sentence.original_variables()}


class ClassifierModel(keras.Model):
    """Encoder + dropout + a linear layer on the pooled output, as run_classifier.py."""

    def __init__(self, config: BertConfig, num_labels: int, dropout: float = 0.1, **kwargs):
        super().__init__(name=kwargs.pop("name", "bert_classifier"), **kwargs)
        self.config = config
        self.encoder = BertEncoder(config)
        self.encoder.build()
        self.dropout = Dropout(dropout)
        self.classifier = OutputLayer(config, num_labels, "", name="classifier")
        self.classifier.build()
        self.built = True

    def call(self, features, training=False, seed=None):
        pooled = self.encoder(features, training=training, seed=fold(seed, 0))["pooled_output"]
        return {"logits": self.classifier(self.dropout(pooled, training=training,
                                                       seed=fold(seed, 1)))}

    def original_variables(self) -> dict:
        return {**self.encoder.original_variables(), **self.classifier.original_variables()}


class SquadModel(keras.Model):
    """Encoder + a linear start/end layer on every token, as run_squad.py: ``cls/squad/
    output_weights`` [2, hidden] and ``cls/squad/output_bias`` [2] (no dropout on the head)."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(name=kwargs.pop("name", "bert_squad"), **kwargs)
        self.config = config
        self.encoder = BertEncoder(config)
        self.encoder.build()
        self.span = OutputLayer(config, 2, "cls/squad", name="squad")
        self.span.build()
        self.built = True

    def call(self, features, training=False, seed=None):
        sequence = self.encoder(features, training=training, seed=fold(seed, 0))["sequence_output"]
        logits = self.span(sequence)   # [batch, seq, 2], float32
        return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}

    def original_variables(self) -> dict:
        return {**self.encoder.original_variables(), **self.span.original_variables()}


def build_encoder(config: BertConfig) -> BertEncoder:
    encoder = BertEncoder(config)
    encoder.build()
    return encoder


# -- what the jobs' losses and metrics share (float32 logits, integer labels) --------------------

def cross_entropy(labels, logits):
    """Per-example softmax cross-entropy of integer ``labels`` under ``logits`` (last axis);
    on TensorFlow ``tf.nn.sparse_softmax_cross_entropy_with_logits``, as the original."""
    return backend_ops.sparse_cross_entropy(labels, logits)


def correct(logits, labels):
    """1.0 where the arg-max of ``logits`` is the label, else 0.0 (float32)."""
    return ops.cast(ops.equal(ops.argmax(logits, axis=-1), ops.cast(labels, "int32")), "float32")
