"""An independent BERT forward pass in numpy, from a checkpoint's raw arrays.

Written from the math of google-research/bert's modeling.py (float64), sharing no code with
jobs.bert: the parity tests compare jobs.bert.load_encoder against it.
"""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf)


def gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def bert(w: dict, num_layers: int, num_heads: int, token_ids, segment_ids, mask, act=gelu_erf):
    """(sequence_output, pooled_output) for int arrays [batch, seq]."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    batch, seq = token_ids.shape
    e = "bert/embeddings/"
    x = w[e + "word_embeddings"][token_ids] + w[e + "token_type_embeddings"][segment_ids]
    x = x + w[e + "position_embeddings"][:seq][None]
    x = layer_norm(x, w[e + "LayerNorm/gamma"], w[e + "LayerNorm/beta"])
    hidden = x.shape[-1]
    d = hidden // num_heads
    adder = (1.0 - mask[:, None, None, :].astype(np.float64)) * -10000.0
    for n in range(num_layers):
        p = f"bert/encoder/layer_{n}/"

        def dense(t, name, p=p):
            return t @ w[p + name + "/kernel"] + w[p + name + "/bias"]

        def heads(t):
            return t.reshape(batch, seq, num_heads, d).transpose(0, 2, 1, 3)

        q = heads(dense(x, "attention/self/query"))
        k = heads(dense(x, "attention/self/key"))
        v = heads(dense(x, "attention/self/value"))
        probs = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + adder)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = layer_norm(x + dense(context, "attention/output/dense"),
                       w[p + "attention/output/LayerNorm/gamma"], w[p + "attention/output/LayerNorm/beta"])
        inner = act(dense(x, "intermediate/dense"))
        x = layer_norm(x + dense(inner, "output/dense"),
                       w[p + "output/LayerNorm/gamma"], w[p + "output/LayerNorm/beta"])
    pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
    return x, pooled
