"""``bert_config.json``: the hyper-parameters of an original google-research BERT model.

No TensorFlow here: the spec checker and the tiny-model generator read configs too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

# hidden_act values: "gelu" is the exact erf GELU the released checkpoints were trained with
# (google-research/bert's first release, Oct 2018); "gelu_tanh" (alias "gelu_new") is the tanh
# approximation its modeling.py switched to in Feb 2019 and keras-hub uses.
ACTIVATIONS = ("gelu", "gelu_tanh", "gelu_new", "relu", "tanh")


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02

    @classmethod
    def from_dict(cls, data: dict) -> BertConfig:
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in data.items() if k in known})
        config.check()
        return config

    @classmethod
    def from_json(cls, text: str) -> BertConfig:
        return cls.from_dict(json.loads(text))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    def check(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of "
                             f"num_attention_heads {self.num_attention_heads}; fix bert_config.json")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported; use one of "
                             f"{', '.join(ACTIVATIONS)} in bert_config.json")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def num_parameters(self) -> int:
        """Encoder parameters (embeddings, layers, pooler), for FLOP estimates."""
        h, i, n = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        embeddings = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
        return embeddings + n * layer + h * h + h

    def train_flops_per_sequence(self, seq_length: int) -> float:
        """Training FLOPs for one sequence: 6 per parameter-token for the matmuls (forward 2,
        backward 4) plus attention's score and context products (6 * 2 * s^2 * h per layer).

        BERT-base at 128 tokens: ~85 GFLOP, the figure the benchmark divides by.
        """
        s, h = seq_length, self.hidden_size
        dense = 6.0 * self.num_parameters() * s
        attention = 6.0 * 2.0 * s * s * h * self.num_hidden_layers
        return dense + attention
