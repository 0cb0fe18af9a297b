"""examples/bert_ner: BERT token classification written against the public `job: keras` API.
Its entity-level precision, recall and F1 (in the graph, so exact on any slice) are seqeval's,
on the example's own dev data under many kinds of wrong predictions and on what a model
fine-tuned from an original BERT checkpoint predicts."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.tf]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "bert_ner"
TYPES = ["ANIMAL", "FOOD", "PLACE"]


@pytest.fixture(scope="module")
def ner():
    spec = importlib.util.spec_from_file_location("bert_ner_example", EXAMPLE / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mistakes(tags: list[str], names: list[str], rng: random.Random) -> list[str]:
    """``tags`` with about a quarter of them replaced: types swapped, B- for I- and back, O for
    an entity word and an entity where there was none (I- after O included)."""
    return [rng.choice(names) if rng.random() < 0.25 else t for t in tags]


def scores(ner, tokenizer, gold: list[list[str]], predicted: list[list[str]]) -> tuple[float, float, float]:
    """The example's precision, recall and F1 of ``predicted`` against ``gold`` (word tags)."""
    words = [[f"w{i}" for i in range(len(s))] for s in gold]
    names = ner.tag_names(TYPES)
    _, want = ner.encode(list(zip(words, gold)), tokenizer, names, 64)
    _, got = ner.encode(list(zip(words, predicted)), tokenizer, names, 64)
    tp, found, total = (float(np.sum(x)) for x in ner.entity_counts(want["tags"], got["tags"], want["mask"]))
    return (tp / found if found else 0.0, tp / total if total else 0.0,
            2 * tp / (found + total) if found + total else 0.0)


def test_the_examples_entity_scores_are_seqevals(ner, tiny_dir):
    from seqeval.metrics import f1_score, precision_score, recall_score

    from jobs.bert.tokenization import FullTokenizer

    tokenizer = FullTokenizer(str(tiny_dir / "vocab.txt"), True)
    gold = [tags for _, tags in ner.read_conll(str(EXAMPLE / "data" / "dev.conll"))]
    names = ner.tag_names(TYPES)
    rng = random.Random(7)
    cases = [gold, [["O"] * len(s) for s in gold]]
    cases += [[mistakes(s, names, rng) for s in gold] for _ in range(6)]
    # by hand: an I- that starts an entity, a type switch inside one, B- B-, an entity at the end
    cases.append([["I-FOOD", "I-FOOD", "I-ANIMAL", "B-PLACE", "B-PLACE", "O", "I-PLACE"][:len(s)]
                  + ["B-ANIMAL"] * (len(s) - 7) for s in gold])
    for predicted in cases:
        want = (precision_score(gold, predicted, zero_division=0), recall_score(gold, predicted, zero_division=0),
                f1_score(gold, predicted, zero_division=0))
        assert scores(ner, tokenizer, gold, predicted) == pytest.approx(want, abs=1e-12)


def test_bert_ner_fine_tunes_an_original_checkpoint_and_reports_seqevals_f1(ner, tiny_dir, tmp_path):
    """The example trained by the runner (in this process) from the tiny original checkpoint:
    the eval_f1 it reports is seqeval's F1 on the tags it predicts (predictions.jsonl, read at
    each word's first piece); the pooler, which no loss reaches, is the original's."""
    import tensorflow as tf
    from seqeval.metrics import f1_score

    from jobs import spec as spec_lib
    from jobs.bert.tokenization import FullTokenizer
    from jobs.runner.registry import run_spec

    model_dir = tmp_path / "run"
    spec = spec_lib.load(str(EXAMPLE / "spec.yaml"), [f"model_dir={model_dir}", f"params.bert_dir={tiny_dir}",
                                                       "num_train_steps=100"])
    assert run_spec(spec, search=[str(EXAMPLE)]) == 0
    progress = json.loads((model_dir / "progress.json").read_text())
    reported = progress["metrics"]["eval_f1"]

    sentences = ner.read_conll(str(EXAMPLE / "data" / "dev.conll"))
    names = ner.tag_names(TYPES)
    tokenizer = FullTokenizer(str(tiny_dir / "vocab.txt"), True)
    _, labels = ner.encode(sentences, tokenizer, names, 32)
    rows = [json.loads(line)["tags"] for line in (model_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == len(sentences)
    predicted = [[names[t] for t, m in zip(row, mask) if m] for row, mask in zip(rows, labels["mask"])]
    gold = [tags for _, tags in sentences]
    assert reported == pytest.approx(f1_score(gold, predicted), abs=1e-6) and reported > 0.8

    trained = tf.train.load_checkpoint(str(model_dir / "ckpt-100"))
    original = tf.train.load_checkpoint(str(tiny_dir / "bert_model.ckpt"))
    # checkpoint keys are the Keras paths (bert/pooler/kernel), the original's names differ
    for path, name in (("bert/pooler/kernel", "bert/pooler/dense/kernel"),
                       ("bert/embeddings/word_embeddings", "bert/embeddings/word_embeddings")):
        key = "model/" + path.replace("/", ".S") + "/.ATTRIBUTES/VARIABLE_VALUE"
        same = np.array_equal(trained.get_tensor(key), original.get_tensor(name))
        assert same == ("pooler" in name), name
