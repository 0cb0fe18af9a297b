"""``python -m jobs.bert.predict SAVED_MODEL FILE``: label text with an exported fine-tuned model.

SAVED_MODEL is a fine-tune's ``<model_dir>/saved_model`` (:mod:`jobs.bert.serving`). FILE is
tokenized with the vocabulary and casing exported beside it, exactly as the job tokenized its
``test_file``, and run through the ``serving_default`` signature on this machine (CPU or GPU);
the outputs have the job's formats: ``test_results.tsv`` and ``predictions.jsonl`` for a
classifier (FILE a TSV/CSV), ``predictions.json`` and ``nbest_predictions.json`` for SQuAD (FILE
SQuAD JSON), in ``--output`` (default: the current directory).

Exit codes: 0 done; 2 bad input (one line naming the fix, before the model loads).
"""

from __future__ import annotations

import json
import os
import sys
import time

from .. import exitcodes
from ..errors import ArgumentParser


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m jobs.bert.predict",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("saved_model", help="a fine-tune's <model_dir>/saved_model directory")
    parser.add_argument("file", help="TSV/CSV of texts to label (the training columns, label "
                                     "optional)")
    parser.add_argument("--output", default=".", help="directory for the outputs (default: .)")
    parser.add_argument("--batch-size", type=int, default=32, help="examples per model call")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's C++ start-up logs")
    args = parser.parse_args(argv)
    from ..quiet import quiet_tensorflow

    quiet_tensorflow(args.verbose)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from ..errors import ConfigError, report

    try:
        return run(args.saved_model, args.file, args.output, args.batch_size)
    except ConfigError as exc:
        report(exc)
        return exitcodes.BAD_SPEC


def read_info(saved_model: str) -> dict:
    from ..errors import ConfigError
    from .export_layout import MODEL_INFO

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
    if info.get("kind") == "squad":
        return run_squad(saved_model, info, file, output, batch_size)
    if info.get("kind") != "classifier":
        raise ConfigError(f"{saved_model} is a {info.get('kind')} model; this command runs "
                          "a bert-finetune or bert-squad SavedModel")
    if file.lower().endswith(".json"):
        raise ConfigError(f"{saved_model} is a classifier; {file} looks like SQuAD JSON: pass a "
                          ".tsv or .csv of texts")
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


def run_squad(saved_model: str, info: dict, file: str, output: str, batch_size: int) -> int:
    """SQuAD JSON -> windows (the job's features) -> span logits -> the job's decoding:
    ``predictions.json`` and ``nbest_predictions.json`` (and ``null_odds.json`` for v2.0)."""
    from ..errors import ConfigError
    from . import squad

    if not file.lower().endswith(".json"):
        raise ConfigError(f"{saved_model} is a SQuAD model; pass a SQuAD JSON file, not {file}")
    import tensorflow as tf

    from .tokenization import FullTokenizer

    v2 = info["version_2_with_negative"]
    tokenizer = FullTokenizer(os.path.join(saved_model, "vocab.txt"), info["do_lower_case"])
    try:
        examples = squad.read_examples(file, False, v2)
        features = squad.convert_to_features(examples, tokenizer, info["max_seq_length"],
                                             info["doc_stride"], info["max_query_length"], False)
    except squad.SquadError as exc:
        raise ConfigError(str(exc)) from None
    serve = tf.saved_model.load(saved_model).signatures["serving_default"]
    logits = {}
    for i in range(0, len(features), batch_size):
        part = features[i:i + batch_size]
        out = serve(input_ids=tf.constant([f.input_ids for f in part], tf.int32),
                    input_mask=tf.constant([f.input_mask for f in part], tf.int32),
                    segment_ids=tf.constant([f.segment_ids for f in part], tf.int32))
        for f, start, end in zip(part, out["start_logits"].numpy(), out["end_logits"].numpy()):
            logits[f.unique_id] = (start.tolist(), end.tolist())
    prediction = squad.predict(examples, features, logits, info["n_best_size"],
                               info["max_answer_length"], info["do_lower_case"], v2,
                               info["null_score_diff_threshold"])
    outputs = {"predictions.json": prediction.answers, "nbest_predictions.json": prediction.nbest}
    if v2:
        outputs["null_odds.json"] = prediction.null_odds
    os.makedirs(output, exist_ok=True)
    for name, value in outputs.items():
        with open(os.path.join(output, name), "w") as f:
            f.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    print(f"{len(examples)} questions: {os.path.join(output, 'predictions.json')}",
          file=sys.stderr)
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
