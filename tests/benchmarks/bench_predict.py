"""Classifier prediction throughput, BERT-base at seq 128: ``python -m jobs.bert.predict`` on an
exported SavedModel next to the same model called through Keras directly.

The model is BERT-base (12 layers, hidden 768, vocab 30522) with a 2-label head, randomly
initialised (throughput does not depend on the values), exported by the job's own exporter
(:mod:`jobs.bert.serving`). The input is a TSV of long lines, so every example fills 128 tokens.

- ``cli``: the command as a user runs it, in a fresh process; its own examples/s line (model
  calls only: tokenizing and loading are excluded) and the process's wall time;
- ``keras``: the :class:`jobs.bert.modeling.ClassifierModel` holding the same values, called in
  a ``tf.function`` on the same batches in this process (the first batch, which traces, is
  excluded the same way: it is run once before timing).

``python -m tests.benchmarks predict``; overrides ``BENCH_PREDICT_EXAMPLES`` (64),
``BENCH_PREDICT_BATCH`` (32).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02}


def run() -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from jobs.bert import classifier, read_config, serving, weights
    from jobs.bert.modeling import ClassifierModel
    from jobs.bert.tokenization import FullTokenizer

    n = int(os.environ.get("BENCH_PREDICT_EXAMPLES", "64"))
    batch = int(os.environ.get("BENCH_PREDICT_BATCH", "32"))
    with tempfile.TemporaryDirectory() as tmp:
        bert = Path(tmp) / "bert"
        bert.mkdir()
        (bert / "bert_config.json").write_text(json.dumps(BASE))
        words = [f"word{i}" for i in range(2000)]
        (bert / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                   *words]) + "\n")
        rng = np.random.default_rng(0)
        test = Path(tmp) / "test.tsv"
        test.write_text("".join(" ".join(rng.choice(words, 160)) + "\n" for _ in range(n)))
        config = read_config(str(bert))
        model = ClassifierModel(config, 2)
        values = weights.values_of(model.original_variables())
        saved = serving.export(f"{tmp}/saved_model", serving.CLASSIFIER,
                               lambda: ClassifierModel(config, 2), values, str(bert),
                               {"do_lower_case": True, "max_seq_length": 128, "text_b": False},
                               labels=["a", "b"])

        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "jobs.bert.predict", saved, str(test),
                               "--output", f"{tmp}/out", "--batch-size", str(batch)], cwd=REPO,
                              capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        cli_rate = float(re.search(r"\(([\d.]+) examples/s\)", proc.stderr).group(1))

        tokenizer = FullTokenizer(str(bert / "vocab.txt"), True)
        arrays = classifier.to_arrays(classifier.read_test_examples(str(test), False), ["a", "b"],
                                      tokenizer, 128, str(test))
        call = tf.function(lambda f: tf.nn.softmax(model(f, training=False)["logits"], -1))
        batches = [{k: tf.constant(arrays[k][i:i + batch])
                    for k in ("token_ids", "padding_mask", "segment_ids")}
                   for i in range(0, n, batch)]
        call(batches[0])  # trace
        started = time.perf_counter()
        keras_out = np.concatenate([call(b).numpy() for b in batches])
        keras_rate = n / (time.perf_counter() - started)
        cli_out = np.loadtxt(f"{tmp}/out/test_results.tsv", ndmin=2)
        return {"examples": n, "batch": batch, "seq": 128,
                "cli_examples_per_s": round(cli_rate, 2),
                "cli_wall_s": round(wall, 1),
                "keras_examples_per_s": round(keras_rate, 2),
                "max_abs_diff": float(np.abs(cli_out - keras_out).max())}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
