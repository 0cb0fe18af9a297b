"""Classifier predictions on an emulated v2-32 (4 hosts, 32 cores) on the local provider: 37 test
lines in predict batches of 8 (fitted to 32 for the slice, so one padded batch) come back one row
per line, in order, equal to the exported SavedModel's probabilities on the same text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_tpuctl_process

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.long, pytest.mark.xdist_group("tf-e2e")]

LINES = 37


def test_an_emulated_v2_32_predicts_every_test_line_once_in_order(tiny_bert, isolated_env,
                                                                   tmp_path):
    texts = [line.split("\t")[0] for line in (tiny_bert / "dev.tsv").read_text().splitlines()[1:]]
    test = tmp_path / "test.tsv"
    test.write_text("".join(f"{t}\n" for t in texts[:LINES]))  # no header, no label
    assert run_tpuctl_process("up", "pod", "--accelerator-type", "v2-32").code == 0
    sets = {"bert_dir": tiny_bert, "train_file": f"{tiny_bert}/train.tsv", "test_file": test,
            "num_train_steps": 10, "train_batch_size": 32, "save_checkpoints_steps": 10,
            "steps_per_execution": 5, "predict_batch_size": 8}
    args = ["train", "pod", "--job", "templates/bert-finetune-tiny.yaml", "--poll", "1", "--json"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    done = run_tpuctl_process(*args, timeout=600)
    assert done.code == 0, done.err[-3000:]
    result = json.loads(done.out)["run"]
    assert result["status"] == "finished", done.err[-3000:]
    home = Path(os.environ["TPUCTL_HOME"])
    model_dir = (home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / result["run_id"]
                 / "model")
    # `tpuctl status` names what the run wrote for its user
    status = run_tpuctl_process("status", "pod")
    assert (f"{result['run_id']} outputs in {result['model_dir']}: test_results.tsv, "
            "predictions.jsonl, saved_model/") in status.out, status.out
    rows = (model_dir / "test_results.tsv").read_text().splitlines()
    assert len(rows) == LINES
    job_probs = np.array([r.split("\t") for r in rows], np.float64)

    import tensorflow as tf

    from jobs.bert import classifier
    from jobs.bert.tokenization import FullTokenizer

    saved = model_dir / "saved_model"
    arrays = classifier.to_arrays(classifier.read_test_examples(str(test), False),
                                  ["neg", "pos"], FullTokenizer(str(saved / "vocab.txt"), True),
                                  32, str(test))
    serve = tf.saved_model.load(str(saved)).signatures["serving_default"]
    out = serve(input_ids=tf.constant(arrays["token_ids"]),
                input_mask=tf.constant(arrays["padding_mask"]),
                segment_ids=tf.constant(arrays["segment_ids"]))["probabilities"].numpy()
    np.testing.assert_allclose(job_probs, out, atol=1e-5)
    assert np.abs(np.diff(job_probs[:, 0])).max() > 1e-4  # rows differ: the order is checked
