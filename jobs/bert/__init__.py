"""BERT on the runner: the encoder, its original checkpoints, tokenization, data and jobs.

``load_encoder(bert_dir)`` is the contract other code relies on (DESIGN.md). TensorFlow is
imported only when a function needs it, so ``jobs.bert.tokenization`` and ``jobs.bert.config``
stay usable without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .modeling import BertEncoder

REQUIRED_FILES = ("bert_config.json", "vocab.txt")


def load_encoder(bert_dir: str) -> BertEncoder:
    """A Keras model built from an original google-research BERT directory.

    ``bert_dir`` holds ``bert_config.json``, ``vocab.txt`` and ``bert_model.ckpt.*`` (local or
    gs://; a directory exported by a ``bert-pretrain`` run has the same layout). Calling the
    model on ``{"token_ids", "segment_ids", "padding_mask"}`` (int tensors [batch, seq]) returns
    ``{"sequence_output": [batch, seq, hidden], "pooled_output": [batch, hidden]}``, numerically
    equal to the original BERT. Raises :class:`jobs.errors.ConfigError` (one line naming the fix)
    when a file is missing or the config does not match the checkpoint's shapes.
    """
    from . import weights
    from .modeling import build_encoder

    config = read_config(bert_dir)
    prefix = _join(bert_dir, "bert_model.ckpt")
    import tensorflow as tf

    if not tf.io.gfile.exists(prefix + ".index"):
        from ..errors import ConfigError

        raise ConfigError(f"{bert_dir} has no bert_model.ckpt.index; copy all bert_model.ckpt.* "
                          "files of the release (index and data) into it")
    encoder = build_encoder(config)
    weights.restore(encoder.original_variables(), prefix)
    encoder.bert_dir = bert_dir
    return encoder


def read_config(bert_dir: str):
    """``bert_config.json`` of ``bert_dir`` (any TensorFlow filesystem), checked."""
    import tensorflow as tf

    from ..errors import ConfigError
    from .config import BertConfig

    for name in REQUIRED_FILES:
        if not tf.io.gfile.exists(_join(bert_dir, name)):
            raise ConfigError(f"{bert_dir} has no {name}; point bert_dir at the directory unpacked "
                              "from a google-research BERT release (bert_config.json, vocab.txt, "
                              "bert_model.ckpt.*)")
    try:
        with tf.io.gfile.GFile(_join(bert_dir, "bert_config.json")) as f:
            return BertConfig.from_json(f.read())
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{bert_dir}/bert_config.json is not a BERT config ({exc}); restore it "
                          "from the release") from None


def check_case(spec) -> None:
    """``do_lower_case`` against the model's name or vocabulary (:mod:`jobs.bert.casing`), for
    any TensorFlow filesystem; raises :class:`jobs.errors.ConfigError` (exit 2)."""
    from .casing import check
    from .tokenization import read_bytes, vocab_lines

    tokens = vocab_lines(read_bytes(_join(spec.bert_dir, "vocab.txt")))
    check(spec.do_lower_case, spec.bert_dir, spec.resolved_init_checkpoint, tokens)


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name
