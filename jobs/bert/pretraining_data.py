"""Pretraining data: text corpus -> masked-LM / next-sentence examples in TFRecord shards.

Equivalent to google-research/bert's create_pretraining_data.py, so its shards and ours are
interchangeable (same feature names, shapes and sampling):

- the corpus has one sentence per line and a blank line between documents;
- each document is cut into chunks of about ``max_seq_length - 3`` tokens (with probability
  ``short_seq_prob`` a shorter random target length, so the model also sees short inputs);
- a chunk splits at a random sentence boundary into A and B; half the time (always when the chunk
  is one sentence) B is replaced by text from a random other document (``next_sentence_labels``
  1) and the unused sentences go back to the document;
- the pair is trimmed to fit, randomly from the front or the back of the longer side;
- ``round(len * masked_lm_prob)`` positions (at least 1, at most ``max_predictions_per_seq``) are
  chosen at random among the non-special tokens, whole words together with
  ``do_whole_word_mask``; each becomes ``[MASK]`` 80 % of the time, stays 10 %, and is a random
  vocabulary token 10 %;
- everything repeats ``dupe_factor`` times with fresh randomness, and the instances are shuffled.

Command line: ``python -m jobs.bert.pretraining_data --input_file a.txt,b.txt --output_dir DIR
--vocab_file vocab.txt [--do_lower_case] [--do_whole_word_mask] ...``.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .tokenization import CLS, MASK, SEP, FullTokenizer, open_text

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "next_sentence_labels")


@dataclass(frozen=True)
class DataOptions:
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    dupe_factor: int = 10
    short_seq_prob: float = 0.1
    do_whole_word_mask: bool = False
    random_seed: int = 12345


@dataclass
class Instance:
    tokens: list[str]
    segment_ids: list[int]
    masked_lm_positions: list[int]
    masked_lm_labels: list[str]
    is_random_next: bool


def read_documents(paths: Iterable[str], tokenizer: FullTokenizer) -> list[list[list[str]]]:
    """Documents as lists of tokenized sentences; blank lines separate documents."""
    documents: list[list[list[str]]] = [[]]
    for path in paths:
        with open_text(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    documents.append([])
                    continue
                tokens = tokenizer.tokenize(line)
                if tokens:
                    documents[-1].append(tokens)
    return [d for d in documents if d]


def create_instances(documents: list[list[list[str]]], vocab_words: Sequence[str],
                     opts: DataOptions, rng: random.Random) -> list[Instance]:
    documents = list(documents)
    rng.shuffle(documents)
    instances: list[Instance] = []
    for _ in range(opts.dupe_factor):
        for index in range(len(documents)):
            instances.extend(_instances_from_document(documents, index, vocab_words, opts, rng))
    rng.shuffle(instances)
    return instances


def _instances_from_document(documents, index, vocab_words, opts: DataOptions,
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


def write_shards(instances: Sequence[Instance], tokenizer: FullTokenizer, opts: DataOptions,
                 output_files: Sequence[str]) -> int:
    """Round-robin the instances over ``output_files`` (TFRecord, any TF filesystem)."""
    import tensorflow as tf

    def feature(values: list) -> tf.train.Feature:
        if values and isinstance(values[0], float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    writers = [tf.io.TFRecordWriter(path) for path in output_files]
    try:
        for i, instance in enumerate(instances):
            features = to_features(instance, tokenizer, opts)
            example = tf.train.Example(features=tf.train.Features(
                feature={k: feature(features[k]) for k in FEATURES}))
            writers[i % len(writers)].write(example.SerializeToString())
    finally:
        for w in writers:
            w.close()
    return len(instances)


def create(input_files: Sequence[str], output_files: Sequence[str], tokenizer: FullTokenizer,
           opts: DataOptions) -> int:
    """The whole pipeline; returns the number of instances written."""
    rng = random.Random(opts.random_seed)
    documents = read_documents(input_files, tokenizer)
    if not documents:
        raise ValueError(f"no text in {', '.join(input_files)}")
    instances = create_instances(documents, list(tokenizer.vocab), opts, rng)
    return write_shards(instances, tokenizer, opts, output_files)


def expand_globs(patterns: str) -> list[str]:
    import tensorflow as tf

    files: list[str] = []
    for pattern in [p.strip() for p in patterns.split(",") if p.strip()]:
        files.extend(sorted(tf.io.gfile.glob(pattern)))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.bert.pretraining_data",
                                     description="Create BERT pretraining TFRecords from text.")
    parser.add_argument("--input_file", required=True, help="comma-separated globs of text files")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--num_shards", type=int, default=1)
    parser.add_argument("--do_lower_case", action=argparse.BooleanOptionalAction, default=True)
    for name, default in vars(DataOptions()).items():
        if isinstance(default, bool):
            parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=default)
        else:
            parser.add_argument(f"--{name}", type=type(default), default=default)
    args = parser.parse_args(argv)
    opts = DataOptions(**{k: getattr(args, k) for k in vars(DataOptions())})
    import tensorflow as tf

    tf.io.gfile.makedirs(args.output_dir)
    outputs = [f"{args.output_dir.rstrip('/')}/pretraining-{i:05d}-of-{args.num_shards:05d}.tfrecord"
               for i in range(args.num_shards)]
    count = create(expand_globs(args.input_file), outputs,
                   FullTokenizer(args.vocab_file, args.do_lower_case), opts)
    print(f"wrote {count} instances to {len(outputs)} shard(s) in {args.output_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
