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

Command line: ``python -m jobs.pretraining --input_file a.txt,b.txt --output_dir DIR
--vocab_file vocab.txt [--workers N] [--parts N] [--exact] [--do_lower_case] ...``. By default
the parallel, bounded-memory path of :mod:`jobs.pretraining.parallel` runs; ``--exact``
runs this module's single stream (the original's output, byte for byte). Both write a
``manifest.json`` and print one JSON line with the ``input_files`` glob.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Iterable, Sequence

from ..bert.tokenization import FullTokenizer, open_text, read_bytes
from ..bert.vocab import too_large
from ..errors import ArgumentParser, ConfigError, report
from . import beam_options
from .sampling import (
    FEATURES,
    DataOptions,
    Instance,
    instances_from_document,
    mask_tokens,
    to_features,
)

__all__ = ["FEATURES", "DataOptions", "Instance", "create", "create_instances", "expand_globs",
           "instances_from_document", "main", "mask_tokens", "read_documents", "to_features",
           "write_shards"]


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
            instances.extend(instances_from_document(documents, index, vocab_words, opts, rng))
    rng.shuffle(instances)
    return instances


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
            writers[i % len(writers)].write(example.SerializeToString(deterministic=True))  # map keys sorted
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
    """Comma-separated globs, each sorted; local ones without TensorFlow."""
    files: list[str] = []
    for pattern in [p.strip() for p in patterns.split(",") if p.strip()]:
        if "://" in pattern:
            import tensorflow as tf

            files.extend(sorted(tf.io.gfile.glob(pattern)))
        else:
            import glob

            files.extend(sorted(glob.glob(pattern)))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m jobs.pretraining",
                                     description="Create BERT pretraining TFRecords from text.")
    parser.add_argument("--input_file", required=True, help="comma-separated globs of text files")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--num_shards", type=int, default=1, help="--exact only: shards written")
    parser.add_argument("--do_lower_case", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--exact", action="store_true",
                        help="one stream, everything in memory: byte for byte the original's output")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes (default: every core); the output does not depend on it")
    parser.add_argument("--parts", type=int, default=0,
                        help="parts the corpus is cut into (default: max(8, corpus MB / 64)); "
                             "the output depends on it")
    parser.add_argument("--runner", choices=beam_options.RUNNERS, default="local",
                        help="local: worker processes here (the default); beam: the same parts as an "
                             "Apache Beam pipeline on every core here; dataflow: that pipeline on "
                             "Google Cloud Dataflow (gs:// corpus and output; the beam extra)")
    parser.add_argument("--project", default=None, help="--runner dataflow: the Google Cloud project")
    parser.add_argument("--region", default=None, help="--runner dataflow: e.g. us-central1")
    parser.add_argument("--temp_location", default="", help="--runner dataflow: gs://BUCKET/PATH")
    parser.add_argument("--extra_package", action="append", default=[],
                        help="--runner dataflow: a package Dataflow's workers install (this code)")
    parser.add_argument("--requirements_file", default=None, help="--runner dataflow: pip requirements")
    parser.add_argument("--job_name", default=None, help="--runner dataflow: the job's name")
    parser.add_argument("--max_num_workers", type=int, default=None,
                        help="--runner dataflow: at most this many Dataflow workers")
    parser.add_argument("--dry_run", action="store_true",
                        help="--runner beam|dataflow: print the pipeline options and stop")
    parser.add_argument("--tokenizer", choices=("auto", "python"), default="auto",
                        help="auto: Hugging Face tokenizers for ASCII lines when installed (same "
                             "tokens); python: the pure-Python reference only")
    parser.add_argument("--pool_bytes", type=int, default=None,
                        help="text per pool of documents that random next sentences are drawn from "
                             "(default 16 MB; bounds each worker's memory); the output depends on it")
    for name, default in vars(DataOptions()).items():
        if isinstance(default, bool):
            parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=default)
        else:
            parser.add_argument(f"--{name}", type=type(default), default=default)
    args = parser.parse_args(argv)
    opts = DataOptions(**{k: getattr(args, k) for k in vars(DataOptions())})
    try:
        plan, made = make(args, opts)
    except ConfigError as exc:
        report(exc)
        return 2
    print(json.dumps({"output_dir": args.output_dir, "instances": sum(plan.counts.values()),
                      "shards": len(plan.shards()), "made_parts": made,
                      "input_files": f"{args.output_dir.rstrip('/')}/"
                                     f"{'pretraining' if args.exact else 'part'}-*.tfrecord"}))
    return 0


def make(args, opts: DataOptions):
    """Check the inputs (bad input fails here, before anything is written), then create."""
    from . import parallel as par

    if args.workers < 1 or args.parts < 0 or args.num_shards < 1 or (args.pool_bytes or 1) < 1:
        raise ConfigError("--workers, --num_shards and --pool_bytes must be at least 1, --parts at least 0")
    problem = opts.problem()
    if problem:
        raise ConfigError("; ".join(problem))
    if args.runner != "local":
        if args.exact:
            raise ConfigError("--exact is one stream in one process: drop --runner "
                              f"{args.runner}, or drop --exact")
        return _make_beam(args, opts)
    if "://" in args.output_dir:
        raise ConfigError(f"--output_dir {args.output_dir}: write to a local directory (tpuctl "
                          "data uploads to a bucket)")
    files = expand_globs(args.input_file)
    if not files:
        raise ConfigError(f"--input_file {args.input_file} matches no file")
    inputs = [par.inspect_input(f) for f in files]
    par.check_not_empty(inputs)
    if not os.path.isfile(args.vocab_file):
        raise ConfigError(f"--vocab_file {args.vocab_file} does not exist")
    big = too_large(os.path.getsize(args.vocab_file))
    if big:
        raise ConfigError(f"--vocab_file {args.vocab_file} {big}: give the model's vocab.txt")
    _check_case(args, read_bytes(args.vocab_file))
    plan = _plan(args, opts, inputs, par.file_sha256(args.vocab_file))
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    if not args.exact:
        return par.run(plan, args.vocab_file, args.output_dir, args.workers, log,
                       fast_tokenizer=args.tokenizer == "auto")
    os.makedirs(args.output_dir, exist_ok=True)
    existing = par.reconcile(args.output_dir, plan)
    if existing is not None and existing.complete:
        log(f"{args.output_dir} is complete: nothing to do")
        return existing, 0
    par.write_manifest(args.output_dir, plan)
    outputs = [os.path.join(args.output_dir, name) for name in plan.shards()]
    partial = [f"{o}.partial" for o in outputs]
    count = create(files, partial, FullTokenizer(args.vocab_file, args.do_lower_case), opts)
    for src, dst in zip(partial, outputs):
        os.replace(src, dst)
    plan.counts, plan.complete = {"0": count}, True
    par.write_manifest(args.output_dir, plan)
    return plan, 1


def _check_case(args, vocab: bytes) -> None:
    from ..bert.casing import check as check_case
    from ..bert.tokenization import vocab_lines

    try:
        check_case(args.do_lower_case, os.path.dirname(os.path.abspath(args.vocab_file))
                   if "://" not in args.vocab_file else args.vocab_file.rsplit("/", 1)[0], None,
                   vocab_lines(vocab))
    except ConfigError as exc:
        flag = "--no-do_lower_case" if args.do_lower_case else "--do_lower_case"
        raise ConfigError(str(exc).replace(
            f"--set do_lower_case={'false' if args.do_lower_case else 'true'}", flag)) from None


def _plan(args, opts: DataOptions, inputs, vocab_sha256: str):
    from . import parallel as par

    total_bytes = sum(i.bytes for i in inputs)
    return par.Plan(inputs=inputs, vocab_sha256=vocab_sha256,
                    do_lower_case=args.do_lower_case, options=opts,
                    parts=args.num_shards if args.exact else
                    (args.parts or par.default_parts(total_bytes)),
                    mode="exact" if args.exact else "parallel",
                    pool_bytes=0 if args.exact else (args.pool_bytes or par.POOL_BYTES),
                    shuffle_records=0 if args.exact else par.SHUFFLE_RECORDS)


def _make_beam(args, opts: DataOptions):
    """--runner beam|dataflow: the same plan, inputs read through Beam's FileSystems."""
    import hashlib

    from . import beam_options

    dataflow = None
    if args.runner == "dataflow":
        dataflow = beam_options.Dataflow(
            project=args.project or "", region=args.region or "", temp_location=args.temp_location,
            extra_packages=tuple(args.extra_package), requirements_file=args.requirements_file,
            job_name=args.job_name, max_workers=args.max_num_workers)
        beam_options.check_dataflow(dataflow, [p for p in args.input_file.split(",") if p.strip()],
                                    args.output_dir)
    pipeline_args = beam_options.pipeline_args(args.runner, args.workers, dataflow)
    if args.dry_run:
        print(json.dumps({"runner": args.runner, "pipeline_options": pipeline_args}))
        raise SystemExit(0)
    try:
        from . import beam as pb
    except ImportError as exc:
        raise ConfigError(f"--runner {args.runner} needs Apache Beam ({exc}): pip install "
                          "'tpuctl[beam]' in an environment without TensorFlow") from None
    files = pb.expand(args.input_file)
    if not files:
        raise ConfigError(f"--input_file {args.input_file} matches no file")
    from . import parallel as par

    inputs = [par.inspect_input(f, pb.open_file) for f in files]
    par.check_not_empty(inputs, pb.open_file)
    try:
        vocab = pb.read_bytes(args.vocab_file)
    except OSError:
        raise ConfigError(f"--vocab_file {args.vocab_file} does not exist") from None
    _check_case(args, vocab)
    plan = _plan(args, opts, inputs, hashlib.sha256(vocab).hexdigest())
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    return pb.run(plan, args.vocab_file, args.output_dir, pipeline_args, args.runner, log,
                  fast_tokenizer=args.tokenizer == "auto")

