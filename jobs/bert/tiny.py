"""A tiny google-research-format BERT directory, for tests and ``make demo``.

``python -m jobs.bert.tiny OUT_DIR [--seed N]`` writes, deterministically and in a few seconds:

- ``bert_config.json``: 2 layers, hidden 32, 2 heads, intermediate 64, 64 positions;
- ``vocab.txt``: ~150 tokens (specials, punctuation, words, ``##`` pieces, a few CJK characters);
- ``bert_model.ckpt.{index,data-00000-of-00001}``: every variable of the original TF1 graph under
  its original name, ``cls/predictions/*`` and ``cls/seq_relationship/*`` included, initialised as
  the original does (truncated normal 0.02, LayerNorm 1/0, biases 0);
- ``corpus.txt``: a pretraining corpus (one sentence per line, blank line between documents)
  whose documents each keep to one topic, so masked-LM and next-sentence are both learnable;
- ``train.tsv`` / ``dev.tsv``: a sentiment task (``text<TAB>label``, pos/neg) decided by the
  polarity words in each sentence: learnable by a tiny model in a couple hundred steps;
- ``squad/train-v1.1.json`` / ``squad/dev-v1.1.json``: a SQuAD v1.1 task: paragraphs of topic
  sentences (adjectives as distractors) with one praising or damning clause; the question
  ("is it good ?" / "is it bad ?") asks for its words ("good", "very good", also glued to "!").
"""

from __future__ import annotations

import json
import os
import random

import numpy as np

from ..errors import ArgumentParser
from .config import BertConfig

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PUNCTUATION = [".", ",", "!", "?", "'"]
TOPICS = {
    "animals": ["cat", "dog", "bird", "fish", "horse", "mouse", "cow", "fox"],
    "food": ["bread", "apple", "cheese", "soup", "rice", "cake", "tea", "milk"],
    "city": ["street", "car", "bus", "train", "shop", "park", "road", "bridge"],
    "weather": ["rain", "snow", "wind", "sun", "cloud", "storm", "fog", "sky"],
}
VERBS = ["see", "like", "find", "want", "watch", "hear", "love", "need"]
ADJECTIVES = ["big", "small", "old", "new", "red", "blue", "green", "quiet"]
FUNCTION = ["the", "a", "and", "is", "was", "it", "we", "they", "i", "you", "this", "that",
            "of", "in", "on", "with", "very", "movie", "film", "story", "show", "book",
            "jump", "walk", "play", "run", "read", "quick", "slow", "today", "there"]
PIECES = ["##s", "##ing", "##ed", "##ly", "##er"]
POSITIVE = ["good", "great", "happy", "fun", "lovely", "wonderful", "excellent", "nice"]
NEGATIVE = ["bad", "awful", "sad", "boring", "terrible", "poor", "dull", "ugly"]
CJK = ["中", "文", "我", "你", "好", "的", "是", "人"]


def vocabulary() -> list[str]:
    words = [w for topic in TOPICS.values() for w in topic]
    return (SPECIALS + PUNCTUATION + FUNCTION + VERBS + ADJECTIVES + words + POSITIVE + NEGATIVE
            + PIECES + CJK + [f"[unused{i}]" for i in range(10)])


def tiny_config(vocab_size: int) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, hidden_act="gelu",
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                      max_position_embeddings=64, type_vocab_size=2, initializer_range=0.02)


def original_shapes(config: BertConfig, heads: bool = True) -> dict[str, tuple[int, ...]]:
    """Every variable of google-research/bert's graph: name -> shape (dense kernels [in, out])."""
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes: dict[str, tuple[int, ...]] = {
        "bert/embeddings/word_embeddings": (v, h),
        "bert/embeddings/token_type_embeddings": (config.type_vocab_size, h),
        "bert/embeddings/position_embeddings": (config.max_position_embeddings, h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
    }
    for n in range(config.num_hidden_layers):
        p = f"bert/encoder/layer_{n}"
        for dense, (fan_in, fan_out) in {
            "attention/self/query": (h, h), "attention/self/key": (h, h),
            "attention/self/value": (h, h), "attention/output/dense": (h, h),
            "intermediate/dense": (h, i), "output/dense": (i, h),
        }.items():
            shapes[f"{p}/{dense}/kernel"] = (fan_in, fan_out)
            shapes[f"{p}/{dense}/bias"] = (fan_out,)
        for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
            shapes[f"{p}/{norm}/gamma"] = (h,)
            shapes[f"{p}/{norm}/beta"] = (h,)
    shapes["bert/pooler/dense/kernel"] = (h, h)
    shapes["bert/pooler/dense/bias"] = (h,)
    if heads:
        shapes.update({
            "cls/predictions/transform/dense/kernel": (h, h),
            "cls/predictions/transform/dense/bias": (h,),
            "cls/predictions/transform/LayerNorm/gamma": (h,),
            "cls/predictions/transform/LayerNorm/beta": (h,),
            "cls/predictions/output_bias": (v,),
            "cls/seq_relationship/output_weights": (2, h),
            "cls/seq_relationship/output_bias": (2,),
        })
    return shapes


def initial_values(config: BertConfig, seed: int) -> dict[str, np.ndarray]:
    """The original initialisation: truncated normal (2 stddev) for matrices, LayerNorm gamma 1,
    everything else 0."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in sorted(original_shapes(config).items()):
        if name.endswith("/gamma"):
            value = np.ones(shape, np.float32)
        elif len(shape) == 2:
            value = rng.standard_normal(shape)
            while np.any(np.abs(value) > 2.0):
                bad = np.abs(value) > 2.0
                value[bad] = rng.standard_normal(int(bad.sum()))
            value = (value * config.initializer_range).astype(np.float32)
        else:
            value = np.zeros(shape, np.float32)
        out[name] = value
    return out


def _sentence(rng: random.Random, topic: str) -> str:
    nouns = TOPICS[topic]
    pattern = rng.randrange(4)
    if pattern == 0:
        return f"the {rng.choice(ADJECTIVES)} {rng.choice(nouns)} is {rng.choice(ADJECTIVES)} ."
    if pattern == 1:
        return f"we {rng.choice(VERBS)} the {rng.choice(nouns)} and the {rng.choice(nouns)} ."
    if pattern == 2:
        return f"they {rng.choice(VERBS)}ed a {rng.choice(nouns)} in the {rng.choice(nouns)} today ."
    return f"i {rng.choice(VERBS)} {rng.choice(nouns)}s , {rng.choice(['jumping', 'playing', 'walking'])} there ."


def corpus(rng: random.Random, documents: int = 60) -> str:
    docs = []
    for d in range(documents):
        topic = list(TOPICS)[d % len(TOPICS)]
        docs.append("\n".join(_sentence(rng, topic) for _ in range(rng.randint(4, 9))))
    return "\n\n".join(docs) + "\n"


def _review(rng: random.Random) -> tuple[str, str]:
    label = rng.choice(["pos", "neg"])
    words = POSITIVE if label == "pos" else NEGATIVE
    subject = rng.choice(["movie", "film", "story", "show", "book"])
    filler = rng.choice(list(TOPICS.values()))
    forms = [
        f"the {subject} was {rng.choice(words)}",
        f"this {subject} is very {rng.choice(words)} and {rng.choice(words)}",
        f"a {rng.choice(words)} {subject} with a {rng.choice(filler)}",
        f"i read a {rng.choice(ADJECTIVES)} {subject} , it was {rng.choice(words)} !",
    ]
    return rng.choice(forms), label


def _clause(rng: random.Random, words: list[str]) -> tuple[str, str]:
    """(clause, answer) where the answer is a substring of the clause."""
    subject = rng.choice(["movie", "film", "story", "show", "book"])
    answer = ("very " if rng.random() < 0.3 else "") + rng.choice(words)
    form = rng.randrange(3)
    if form == 0:
        return f"the {subject} was {answer} .", answer
    if form == 1:
        return f"it was {answer}! we read the {subject} today .", answer
    return f"a {answer} {subject} , they said .", answer


def squad_task(rng: random.Random, paragraphs: int, prefix: str) -> dict:
    """A SQuAD v1.1 file: one question per paragraph, its answer at exact character offsets."""
    out = []
    for p in range(paragraphs):
        topic = list(TOPICS)[p % len(TOPICS)]
        parts: list[tuple[str, str | None]] = [(_sentence(rng, topic), None)
                                               for _ in range(rng.randint(1, 4))]
        for kind, words in [rng.choice((("good", POSITIVE), ("bad", NEGATIVE)))]:
            clause, answer = _clause(rng, words)
            parts.insert(rng.randrange(len(parts) + 1), (clause, f"{kind}\t{answer}"))
        context, qas = "", []
        for text, tag in parts:
            if context:
                context += " "
            if tag is not None:
                kind, answer = tag.split("\t")
                start = len(context) + text.index(answer)
                qas.append({"id": f"{prefix}-{p}-{kind}", "question": f"is it {kind} ?",
                            "answers": [{"text": answer, "answer_start": start}]})
            context += text
        qas.sort(key=lambda q: q["id"])
        out.append({"title": f"{prefix}-{p}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "1.1", "data": out}


def write(out_dir: str, seed: int = 0) -> dict[str, str]:
    """Write the directory; returns the paths written by role."""
    from . import weights  # TensorFlow only for the checkpoint

    os.makedirs(out_dir, exist_ok=True)
    vocab = vocabulary()
    config = tiny_config(len(vocab))
    paths = {name: os.path.join(out_dir, name) for name in
             ("bert_config.json", "vocab.txt", "corpus.txt", "train.tsv", "dev.tsv")}
    with open(paths["bert_config.json"], "w", encoding="utf-8") as f:
        f.write(config.to_json())
    with open(paths["vocab.txt"], "w", encoding="utf-8") as f:
        f.write("".join(f"{token}\n" for token in vocab))
    rng = random.Random(seed)
    with open(paths["corpus.txt"], "w", encoding="utf-8") as f:
        f.write(corpus(rng))
    for name, count in (("train.tsv", 480), ("dev.tsv", 160)):
        with open(paths[name], "w", encoding="utf-8") as f:
            f.write("text\tlabel\n")
            for _ in range(count):
                text, label = _review(rng)
                f.write(f"{text}\t{label}\n")
    os.makedirs(os.path.join(out_dir, "squad"), exist_ok=True)
    for name, count in (("train-v1.1.json", 600), ("dev-v1.1.json", 150)):
        paths[name] = os.path.join(out_dir, "squad", name)
        with open(paths[name], "w", encoding="utf-8") as f:
            json.dump(squad_task(rng, count, name.split("-")[0]), f, indent=1)
    paths["checkpoint"] = weights.write(os.path.join(out_dir, "bert_model.ckpt"),
                                        initial_values(config, seed))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m jobs.bert.tiny", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's C++ start-up logs")
    args = parser.parse_args(argv)
    from ..quiet import quiet_tensorflow

    quiet_tensorflow(args.verbose)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    write(args.out_dir, args.seed)
    print(f"wrote a tiny BERT directory to {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
