"""``python -m jobs.bert.predict SAVED_MODEL FILE``: label text with an exported fine-tuned model.

SAVED_MODEL is a fine-tune's ``<model_dir>/saved_model`` (:mod:`jobs.bert.serving`). FILE is
tokenized with the vocabulary and casing exported beside it, exactly as the job tokenized its
``test_file``, and run through the ``serving_default`` signature on this machine (CPU or GPU);
the outputs have the job's formats: ``test_results.tsv`` and ``predictions.jsonl`` for a
classifier, in ``--output`` (default: the current directory).

Exit codes: 0 done; 2 bad input (one line naming the fix, before the model loads).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .. import exitcodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.bert.predict",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("saved_model", help="a fine-tune's <model_dir>/saved_model directory")
    parser.add_argument("file", help="TSV/CSV of texts to label (the training columns, label "
                                     "optional)")
    parser.add_argument("--output", default=".", help="directory for the outputs (default: .)")
    parser.add_argument("--batch-size", type=int, default=32, help="examples per model call")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from ..errors import ConfigError

    try:
        return run(args.saved_model, args.file, args.output, args.batch_size)
    except ConfigError as exc:
        print(f"jobs.bert.predict: error: {exc}", file=sys.stderr)
        return exitcodes.BAD_SPEC


def read_info(saved_model: str) -> dict:
    from ..errors import ConfigError
    from .serving import MODEL_INFO

    path = os.path.join(saved_model, MODEL_INFO)
    if not os.path.isfile(os.path.join(saved_model, "saved_model.pb")):
        raise ConfigError(f"{saved_model} is not a SavedModel directory (no saved_model.pb); pass "
                          "a fine-tune's <model_dir>/saved_model")
    if not os.path.isfile(path):
        raise ConfigError(f"{saved_model} has no {MODEL_INFO}; export it with a tpuctl fine-tune "
                          "(bert-finetune or bert-squad)")
    with open(path) as f:
        return json.load(f)


def run(saved_model: str, file: str, output: str, batch_size: int) -> int:
    from ..errors import ConfigError

    if batch_size < 1:
        raise ConfigError(f"--batch-size {batch_size}: use a positive number")
    if not os.path.isfile(file):
        raise ConfigError(f"{file} not found; pass an existing .tsv or .csv file")
    info = read_info(saved_model)
    if info.get("kind") != "classifier":
        raise ConfigError(f"{saved_model} is a {info.get('kind')} model; this command labels "
                          "text with a bert-finetune classifier's SavedModel")
    import numpy as np
    import tensorflow as tf

    from . import classifier
    from .tokenization import FullTokenizer

    labels = info["labels"]
    tokenizer = FullTokenizer(os.path.join(saved_model, "vocab.txt"), info["do_lower_case"])
    examples = classifier.read_test_examples(file, info.get("text_b", False))
    arrays = classifier.to_arrays(examples, labels, tokenizer, info["max_seq_length"], file)
    serve = tf.saved_model.load(saved_model).signatures["serving_default"]
    started = time.perf_counter()
    parts = []
    for i in range(0, len(examples), batch_size):
        out = serve(input_ids=tf.constant(arrays["token_ids"][i:i + batch_size]),
                    input_mask=tf.constant(arrays["padding_mask"][i:i + batch_size]),
                    segment_ids=tf.constant(arrays["segment_ids"][i:i + batch_size]))
        parts.append(out["probabilities"].numpy())
    seconds = time.perf_counter() - started
    probabilities = np.concatenate(parts)
    classifier.write_outputs(output, probabilities, labels)
    print(f"{len(examples)} predictions ({len(examples) / max(seconds, 1e-9):.1f} examples/s): "
          f"{os.path.join(output, classifier.TEST_RESULTS)}, {classifier.PREDICTIONS}",
          file=sys.stderr)
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
