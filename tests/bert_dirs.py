"""A BERT directory without weights (``bert_config.json`` and ``vocab.txt`` of a one-layer,
16-wide encoder): what a test needs when the spec check or the job reads the config and the
vocabulary but no checkpoint (``init_checkpoint: none``), or adds a crafted one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def config_only_bert(root: Path, words: Sequence[str] = ("a", "b", "c")) -> Path:
    """``root/bert`` with a tiny config whose vocabulary is the special tokens and ``words``."""
    bert = root / "bert"
    bert.mkdir()
    vocab = [*SPECIAL, *words]
    (bert / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (bert / "bert_config.json").write_text(json.dumps({
        "vocab_size": len(vocab), "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 32, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 64, "type_vocab_size": 2,
        "initializer_range": 0.02}))
    return bert
