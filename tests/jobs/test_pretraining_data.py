"""Pretraining data creation: the sampling rules of create_pretraining_data.py."""

from __future__ import annotations

import random

import pytest

from jobs.bert.tokenization import CLS, MASK, SEP, FullTokenizer
from jobs.pretraining import create as pd


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    return FullTokenizer(str(tiny_dir / "vocab.txt"))


@pytest.fixture(scope="module")
def documents(tiny_dir, tokenizer):
    return pd.read_documents([str(tiny_dir / "corpus.txt")], tokenizer)


def make(documents, tokenizer, **kw):
    opts = pd.DataOptions(**{"max_seq_length": 64, "max_predictions_per_seq": 10,
                             "dupe_factor": 4, **kw})
    return pd.create_instances(documents, list(tokenizer.vocab), opts, random.Random(7)), opts


def test_masking_rate_and_prediction_budget(documents, tokenizer):
    instances, opts = make(documents, tokenizer)
    assert len(instances) > 300
    for inst in instances:
        budget = min(opts.max_predictions_per_seq, max(1, round(len(inst.tokens) * 0.15)))
        assert len(inst.masked_lm_positions) == budget
        assert inst.masked_lm_positions == sorted(set(inst.masked_lm_positions))
        assert not set(inst.masked_lm_labels) & {CLS, SEP}
        assert len(inst.tokens) <= opts.max_seq_length
    # The cap binds when 15 % of a long sequence exceeds max_predictions_per_seq.
    capped, _ = make(documents, tokenizer, max_predictions_per_seq=3)
    assert max(len(i.masked_lm_positions) for i in capped) == 3
    # 80 % [MASK], 10 % unchanged, 10 % random token.
    chosen = [(i.tokens[p], label) for i in instances
              for p, label in zip(i.masked_lm_positions, i.masked_lm_labels)]
    masked = sum(t == MASK for t, _ in chosen) / len(chosen)
    kept = sum(t == label for t, label in chosen) / len(chosen)
    assert 0.76 < masked < 0.84
    assert 0.07 < kept < 0.15  # 10 % kept on purpose, plus random draws that hit the label


def test_pairs_segments_and_next_sentence_balance(documents, tokenizer):
    instances, _ = make(documents, tokenizer)
    random_next = sum(i.is_random_next for i in instances) / len(instances)
    assert 0.4 < random_next < 0.65  # 50 %, plus single-sentence chunks that must be random
    for inst in instances:
        assert inst.tokens[0] == CLS and inst.tokens[-1] == SEP
        n_a = inst.segment_ids.count(0)  # [CLS] A [SEP]
        assert inst.segment_ids == [0] * n_a + [1] * (len(inst.tokens) - n_a)
        assert inst.tokens[n_a - 1] == SEP  # never masked: [CLS]/[SEP] are not candidates
        assert n_a >= 3 and len(inst.tokens) - n_a >= 2  # A and B both non-empty


def test_short_sequences_appear_with_short_seq_prob(documents, tokenizer):
    long_only, _ = make(documents, tokenizer, short_seq_prob=0.0, dupe_factor=1)
    mostly_short, _ = make(documents, tokenizer, short_seq_prob=1.0, dupe_factor=1)
    mean = lambda xs: sum(len(i.tokens) for i in xs) / len(xs)
    assert mean(mostly_short) < 0.8 * mean(long_only)


def test_whole_word_masking_masks_every_piece_of_a_word(documents, tokenizer):
    instances, _ = make(documents, tokenizer, do_whole_word_mask=True)
    words_with_pieces = 0
    for inst in instances:
        original = list(inst.tokens)
        for p, label in zip(inst.masked_lm_positions, inst.masked_lm_labels):
            original[p] = label
        masked = set(inst.masked_lm_positions)
        # Group positions into words: a "##" piece joins the word before it.
        words, current = [], []
        for i, token in enumerate(original):
            if token in (CLS, SEP):
                continue
            if token.startswith("##") and current:
                current.append(i)
            else:
                if current:
                    words.append(current)
                current = [i]
        words.append(current)
        for word in words:
            hit = [i in masked for i in word]
            assert all(hit) or not any(hit), (original, word)
            words_with_pieces += len(word) > 1 and all(hit)
    assert words_with_pieces > 20  # the corpus has "cat ##s", "like ##ed", "jump ##ing" ...
    # Without it, pieces of one word are masked independently: some words get split.
    plain, _ = make(documents, tokenizer, do_whole_word_mask=False)
    split = 0
    for inst in plain:
        masked = set(inst.masked_lm_positions)
        original = list(inst.tokens)
        for p, label in zip(inst.masked_lm_positions, inst.masked_lm_labels):
            original[p] = label
        split += sum(1 for i, t in enumerate(original)
                     if t.startswith("##") and (i in masked) != (i - 1 in masked))
    assert split > 0


@pytest.mark.tf
def test_tfrecords_have_the_original_features(tmp_path, tiny_dir, tokenizer):
    import tensorflow as tf

    opts = pd.DataOptions(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=1)
    shards = [str(tmp_path / f"s{i}.tfrecord") for i in range(2)]
    count = pd.create([str(tiny_dir / "corpus.txt")], shards, tokenizer, opts)
    records = [r for s in shards for r in tf.data.TFRecordDataset(s)]
    assert len(records) == count and count > 50
    feats = tf.train.Example.FromString(records[0].numpy()).features.feature
    assert set(feats) == set(pd.FEATURES)
    assert len(feats["input_ids"].int64_list.value) == 64
    assert len(feats["masked_lm_weights"].float_list.value) == 10
    ids = list(feats["input_ids"].int64_list.value)
    mask = list(feats["input_mask"].int64_list.value)
    n = sum(mask)
    assert ids[n:] == [0] * (64 - n) and mask == [1] * n + [0] * (64 - n)
    k = int(sum(feats["masked_lm_weights"].float_list.value))
    assert list(feats["masked_lm_ids"].int64_list.value)[k:] == [0] * (10 - k)
