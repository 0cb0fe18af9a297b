"""Parity: an original TF1 checkpoint loads through load_encoder and matches numpy to 1e-4."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs.bert import load_encoder
from jobs.errors import ConfigError

from . import reference

pytestmark = pytest.mark.tf

CONFIG = {"vocab_size": 50, "hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 3,
          "intermediate_size": 40, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
          "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 16,
          "type_vocab_size": 2, "initializer_range": 0.02}


def original_arrays(config: dict, seed: int = 3) -> dict[str, np.ndarray]:
    """Random weights for every original variable name, large enough that activations are
    O(1) (so an approximate GELU or a missing epsilon would show)."""
    rng = np.random.default_rng(seed)
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    shapes = {"bert/embeddings/word_embeddings": (v, h),
              "bert/embeddings/token_type_embeddings": (config["type_vocab_size"], h),
              "bert/embeddings/position_embeddings": (config["max_position_embeddings"], h),
              "bert/embeddings/LayerNorm/gamma": (h,), "bert/embeddings/LayerNorm/beta": (h,),
              "bert/pooler/dense/kernel": (h, h), "bert/pooler/dense/bias": (h,),
              "cls/predictions/output_bias": (v,),
              "cls/seq_relationship/output_weights": (2, h), "cls/seq_relationship/output_bias": (2,)}
    for n in range(config["num_hidden_layers"]):
        p = f"bert/encoder/layer_{n}/"
        for name, shape in (("attention/self/query", (h, h)), ("attention/self/key", (h, h)),
                            ("attention/self/value", (h, h)), ("attention/output/dense", (h, h)),
                            ("intermediate/dense", (h, i)), ("output/dense", (i, h))):
            shapes[p + name + "/kernel"] = shape
            shapes[p + name + "/bias"] = (shape[1],)
        for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
            shapes[p + norm + "/gamma"] = (h,)
            shapes[p + norm + "/beta"] = (h,)
    out = {}
    for name, shape in shapes.items():
        if name.endswith("gamma"):
            out[name] = (1.0 + 0.2 * rng.standard_normal(shape)).astype(np.float32)
        elif len(shape) == 2:
            out[name] = (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)
        else:
            out[name] = (0.3 * rng.standard_normal(shape)).astype(np.float32)
    return out


def write_with_tf1_saver(prefix: str, arrays: dict[str, np.ndarray]) -> None:
    """The way google-research/bert wrote its checkpoints: graph mode, tf.compat.v1.train.Saver,
    Adam slots and global_step included."""
    graph = tf.Graph()
    with graph.as_default():
        for name, value in arrays.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
        tf.compat.v1.get_variable("bert/pooler/dense/kernel/adam_m",
                                  initializer=tf.zeros_like(arrays["bert/pooler/dense/kernel"]))
        tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix, write_meta_graph=True)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("original")
    (d / "bert_config.json").write_text(json.dumps(CONFIG))
    (d / "vocab.txt").write_text("".join(f"tok{i}\n" for i in range(CONFIG["vocab_size"])))
    arrays = original_arrays(CONFIG)
    write_with_tf1_saver(str(d / "bert_model.ckpt"), arrays)
    return d, arrays


def inputs(seed: int = 5):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(0, CONFIG["vocab_size"], (3, 12)).astype(np.int32)
    segment_ids = np.zeros((3, 12), np.int32)
    segment_ids[:, 6:] = 1
    mask = np.ones((3, 12), np.int32)
    mask[1, 8:] = 0  # padding: must not influence the real positions
    mask[2, 4:] = 0
    return token_ids, segment_ids, mask


def test_original_checkpoint_matches_the_numpy_reference(bert_dir):
    directory, arrays = bert_dir
    encoder = load_encoder(str(directory))
    token_ids, segment_ids, mask = inputs()
    out = encoder({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": mask})
    seq_ref, pooled_ref = reference.bert(arrays, 2, 3, token_ids, segment_ids, mask)
    seq, pooled = out["sequence_output"].numpy(), out["pooled_output"].numpy()
    assert seq.shape == (3, 12, 24) and pooled.shape == (3, 24)
    assert np.abs(seq - seq_ref).max() < 1e-4
    assert np.abs(pooled - pooled_ref).max() < 1e-4
    # The test can tell erf GELU from the tanh approximation (keras-hub's): that gap is several
    # times the tolerance, so passing means the erf form is in use.
    seq_tanh, _ = reference.bert(arrays, 2, 3, token_ids, segment_ids, mask,
                                 act=reference.gelu_tanh)
    assert np.abs(seq - seq_tanh).max() > 2e-4


def test_padding_does_not_change_real_positions(bert_dir):
    directory, _ = bert_dir
    encoder = load_encoder(str(directory))
    token_ids, segment_ids, mask = inputs()
    full = encoder({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": mask})
    other = token_ids.copy()
    other[2, 4:] = 7  # different tokens in the padded tail of example 2
    again = encoder({"token_ids": other, "segment_ids": segment_ids, "padding_mask": mask})
    np.testing.assert_allclose(full["sequence_output"].numpy()[2, :4],
                               again["sequence_output"].numpy()[2, :4], atol=1e-5)


def test_config_that_does_not_match_the_checkpoint(bert_dir, tmp_path):
    directory, _ = bert_dir
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    for f in directory.iterdir():
        (wrong / f.name).write_bytes(f.read_bytes())
    (wrong / "bert_config.json").write_text(json.dumps({**CONFIG, "intermediate_size": 48}))
    with pytest.raises(ConfigError) as err:
        load_encoder(str(wrong))
    message = str(err.value)
    assert "bert_config.json does not match checkpoint" in message
    assert "intermediate/dense/kernel is [24, 40] in the checkpoint but [24, 48]" in message
    assert "\n" not in message


@pytest.mark.parametrize("missing, expected", [
    ("vocab.txt", "has no vocab.txt"),
    ("bert_config.json", "has no bert_config.json"),
    ("bert_model.ckpt.index", "has no bert_model.ckpt.index; copy all bert_model.ckpt.*"),
])
def test_incomplete_bert_dir(bert_dir, tmp_path, missing, expected):
    directory, _ = bert_dir
    for f in directory.iterdir():
        if f.name != missing:
            (tmp_path / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ConfigError, match=expected):
        load_encoder(str(tmp_path))
