"""The sampling rules of create_pretraining_data.py for one document: pairs, truncation, masking,
and the padded features. Shared by the exact single stream (:mod:`jobs.pretraining.create`)
and the parallel parts (:mod:`jobs.pretraining.parallel`)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..bert.tokenization import CLS, MASK, SEP, FullTokenizer
from .data_options import DataOptions

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")


@dataclass
class Instance:
    tokens: list[str]
    segment_ids: list[int]
    masked_lm_positions: list[int]
    masked_lm_labels: list[str]
    is_random_next: bool


def instances_from_document(documents, index, vocab_words, opts: DataOptions,
                             rng: random.Random) -> list[Instance]:
    document = documents[index]
    max_tokens = opts.max_seq_length - 3  # [CLS] A [SEP] B [SEP]
    target = max_tokens
    if rng.random() < opts.short_seq_prob:
        target = rng.randint(2, max_tokens)

    out: list[Instance] = []
    chunk: list[list[str]] = []
    length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
            if len(chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                tokens_b = _random_continuation(documents, index, target - len(tokens_a), rng)
                i -= len(chunk) - a_end  # the sentences not used as A are read again
            else:
                is_random_next = False
                tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
            _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            tokens = [CLS, *tokens_a, SEP, *tokens_b, SEP]
            segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
            tokens, positions, labels = mask_tokens(tokens, vocab_words, opts, rng)
            out.append(Instance(tokens, segment_ids, positions, labels, is_random_next))
            chunk, length = [], 0
        i += 1
    return out


def _random_continuation(documents, index, target_length, rng: random.Random) -> list[str]:
    """Sentences from a random other document (ten tries to avoid this one), from a random
    sentence on, until ``target_length`` tokens."""
    other = index
    for _ in range(10):
        other = rng.randint(0, len(documents) - 1)
        if other != index:
            break
    document = documents[other]
    tokens: list[str] = []
    for sentence in document[rng.randint(0, len(document) - 1):]:
        tokens.extend(sentence)
        if len(tokens) >= target_length:
            break
    return tokens


def _truncate_pair(tokens_a: list[str], tokens_b: list[str], max_tokens: int,
                   rng: random.Random) -> None:
    while len(tokens_a) + len(tokens_b) > max_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def mask_tokens(tokens: list[str], vocab_words: Sequence[str], opts: DataOptions,
                rng: random.Random) -> tuple[list[str], list[int], list[str]]:
    """Choose the masked-LM positions; returns (masked tokens, sorted positions, true tokens)."""
    words: list[list[int]] = []  # candidate units: single positions, or whole words
    for i, token in enumerate(tokens):
        if token in (CLS, SEP):
            continue
        if opts.do_whole_word_mask and words and token.startswith("##"):
            words[-1].append(i)
        else:
            words.append([i])
    rng.shuffle(words)
    budget = min(opts.max_predictions_per_seq,
                 max(1, round(len(tokens) * opts.masked_lm_prob)))
    output = list(tokens)
    chosen: dict[int, str] = {}
    for word in words:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(word) > budget or any(i in chosen for i in word):
            continue
        for i in word:
            chosen[i] = tokens[i]
            if rng.random() < 0.8:
                output[i] = MASK
            elif rng.random() < 0.5:
                output[i] = tokens[i]
            else:
                output[i] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
    positions = sorted(chosen)
    return output, positions, [chosen[i] for i in positions]


def to_features(instance: Instance, tokenizer: FullTokenizer, opts: DataOptions) -> dict[str, list]:
    """Padded feature lists with the names and shapes run_pretraining.py reads."""
    n, p = opts.max_seq_length, opts.max_predictions_per_seq
    ids = tokenizer.convert_tokens_to_ids(instance.tokens)
    if len(ids) > n:
        raise ValueError(f"instance of {len(ids)} tokens exceeds max_seq_length {n}")
    pad = n - len(ids)
    labels = tokenizer.convert_tokens_to_ids(instance.masked_lm_labels)
    k = len(labels)
    return {
        "input_ids": ids + [0] * pad,
        "input_mask": [1] * len(ids) + [0] * pad,
        "segment_ids": list(instance.segment_ids) + [0] * pad,
        "masked_lm_positions": list(instance.masked_lm_positions) + [0] * (p - k),
        "masked_lm_ids": labels + [0] * (p - k),
        "masked_lm_weights": [1.0] * k + [0.0] * (p - k),
        "next_sentence_labels": [1 if instance.is_random_next else 0],
    }


