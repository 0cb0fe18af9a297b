"""A fine-tuned classifier labels new text: test_results.tsv / predictions.jsonl after training,
a SavedModel for serving, and ``python -m jobs.bert.predict`` on it, all agreeing, so
the labels a user serves are the ones the run reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import (
    REPO,
    checkpoint_steps,
    finetune_spec,
    job_env,
    read_progress,
    run_job,
    start_job,
    wait_for,
)

pytestmark = [pytest.mark.tf, pytest.mark.slow]

TEST_LINES = 37  # not a multiple of any batch below: the last batch is padded


def unlabeled_file(tmp_path: Path, tiny: Path, lines: int = TEST_LINES) -> Path:
    """The first ``lines`` dev texts, without their labels, under a header row."""
    texts = [line.split("\t")[0] for line in (tiny / "dev.tsv").read_text().splitlines()[1:]]
    path = tmp_path / "test.tsv"
    path.write_text("text\n" + "".join(f"{t}\n" for t in texts[:lines]))
    return path


def predict_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.bert.predict", *args], cwd=REPO,
                          env=job_env(), capture_output=True, text=True, timeout=120, check=False)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if line.startswith("tpuctl: error:")]


@pytest.mark.long
def test_predictions_savedmodel_and_checkpoint_agree(tmp_path, tiny_dir, job_here):
    """Two replicas and a predict batch of 10 (fitted to 10 over 2 replicas; 37 lines pad to
    40): every line gets exactly one row, in order, and the job's probabilities, the
    SavedModel's and a Keras model restored from the final checkpoint agree to 1e-5."""
    test = unlabeled_file(tmp_path, tiny_dir)
    spec = finetune_spec(tmp_path, tiny_dir, num_train_steps=100, save_checkpoints_steps=100,
                         steps_per_execution=50, test_file=str(test), predict_batch_size=10)
    proc = run_job(spec, env=job_env(TPUCTL_CPU_REPLICAS="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    rows = [line.split("\t") for line in (run / "test_results.tsv").read_text().splitlines()]
    assert len(rows) == TEST_LINES and all(len(r) == 2 for r in rows)  # one column per label
    job_probs = np.array(rows, np.float64)
    np.testing.assert_allclose(job_probs.sum(axis=1), 1.0, atol=1e-5)
    assert job_probs[:, 0].std() > 0.01  # the rows differ, so their order is checked below
    records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(TEST_LINES))
    labels = (run / "labels.txt").read_text().split()
    assert [r["label"] for r in records] == [labels[int(np.argmax(p))] for p in job_probs]
    np.testing.assert_allclose([r["probabilities"] for r in records], job_probs, atol=1e-6)
    # progress.json names what the run wrote for its user (`tpuctl status` shows the list)
    assert read_progress(run)["outputs"] == ["test_results.tsv", "predictions.jsonl",
                                             "saved_model/", "eval_results.json"]

    import tensorflow as tf

    from jobs.bert import classifier, read_config, weights
    from jobs.bert.modeling import ClassifierModel
    from jobs.bert.tokenization import FullTokenizer

    tokenizer = FullTokenizer(str(tiny_dir / "vocab.txt"), True)
    examples = classifier.read_test_examples(str(test), pair=False)
    arrays = classifier.to_arrays(examples, labels, tokenizer, 32, str(test))
    # A Keras model restored from the checkpoint, in file order.
    model = ClassifierModel(read_config(str(tiny_dir)), len(labels))
    weights.restore(model.original_variables(), str(run / f"ckpt-{checkpoint_steps(run)[-1]}"))
    logits = model(arrays, training=False)["logits"]
    keras_probs = tf.nn.softmax(logits, -1).numpy()
    np.testing.assert_allclose(job_probs, keras_probs, atol=1e-5)

    # The SavedModel: the serving signature with the original input names, float32 out.
    saved = run / "saved_model"
    assert {p.name for p in saved.iterdir()} >= {"saved_model.pb", "variables", "vocab.txt",
                                                 "bert_config.json", "labels.txt"}
    serve = tf.saved_model.load(str(saved)).signatures["serving_default"]
    assert sorted(serve.structured_input_signature[1]) == ["input_ids", "input_mask",
                                                            "segment_ids"]
    out = serve(input_ids=tf.constant(arrays["token_ids"]),
                input_mask=tf.constant(arrays["padding_mask"]),
                segment_ids=tf.constant(arrays["segment_ids"]))
    assert list(out) == ["probabilities"] and out["probabilities"].dtype == tf.float32
    np.testing.assert_allclose(out["probabilities"].numpy(), job_probs, atol=1e-5)
    shown = subprocess.run([str(Path(sys.executable).parent / "saved_model_cli"), "show",
                            "--dir", str(saved), "--tag_set", "serve", "--signature_def",
                            "serving_default"], env=job_env(), capture_output=True, text=True,
                           timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "outputs['probabilities']" in shown.stdout and "inputs['input_mask']" in shown.stdout

    # The command line tokenizes the file itself, in batches of 6 (37 = 6 x 6 + 1).
    cli = predict_cli(str(saved), str(test), "--output", str(tmp_path / "out"),
                       "--batch-size", "6")
    assert cli.returncode == 0, cli.stderr[-2000:]
    cli_rows = (tmp_path / "out" / "test_results.tsv").read_text().splitlines()
    np.testing.assert_allclose(np.array([r.split("\t") for r in cli_rows], np.float64),
                               job_probs, atol=1e-5)
    cli_records = (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()
    assert [json.loads(r)["label"] for r in cli_records] == [r["label"] for r in records]

    # Predict only (do_train: false) from the run's model_dir, into a new one, preempted once:
    # the retry ends with the same complete outputs, each written once.
    import signal

    predict_only = finetune_spec(tmp_path, tiny_dir, do_train=False, train_file=None,
                                 init_checkpoint=str(run), model_dir=str(tmp_path / "p"),
                                 test_file=str(test), predict_batch_size=7)
    proc = start_job(predict_only)
    wait_for(lambda: "p" in {p.name for p in tmp_path.iterdir()}
             and (tmp_path / "p" / "finetune_data" / "test.tfrecord").exists(), proc,
             what="the test records")
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 42, output[-3000:]
    again = job_here(predict_only)  # the retry, in this process
    assert again.returncode == 0, again.stderr[-3000:]
    assert "predict only, labels ['neg', 'pos'], 160 dev examples, 37 test examples" in again.stderr
    # The same rows, each once; the digits may differ in the last place, since batches of 7
    # take other kernel paths than the run's batches (CI saw 0.0029010992 against ...0978).
    again_rows = (tmp_path / "p" / "test_results.tsv").read_text().splitlines()
    run_rows = (run / "test_results.tsv").read_text().splitlines()
    assert len(again_rows) == len(run_rows) == 37
    np.testing.assert_allclose(np.array([r.split("\t") for r in again_rows], np.float64),
                               np.array([r.split("\t") for r in run_rows], np.float64),
                               atol=1e-6)
    assert not list((tmp_path / "p").glob("*.tmp")) and (tmp_path / "p" / "saved_model").is_dir()

    # Bad input to the command line: one line, exit 2.
    bad = predict_cli(str(run), str(test))
    assert bad.returncode == 2 and _error_lines(bad.stderr) == [
        (f"tpuctl: error: {run} is not a SavedModel directory (no saved_model.pb); "
        "pass a fine-tune's <model_dir>/saved_model")]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("good film\tyes\tpos\n")
    bad = predict_cli(str(saved), str(pairs))
    assert bad.returncode == 2 and _error_lines(bad.stderr) == [
        (f"tpuctl: error: {pairs} line 1 has 3 columns but training had 1 text "
        "column(s); give text[<TAB>label]")]


@pytest.mark.parametrize("content, message", [
    ("good film\tvery\tpos\n", ("line 1 has 3 columns but training had 1 text column(s); "
                               "give text[<TAB>label]")),
    ("text\tlabel\ngood film\tmeh\n", ("has label(s) 'meh' not in labels (neg, pos); add them "
                                      "with --set labels=...")),
])
def test_a_bad_test_file_stops_before_any_step(tmp_path, tiny_dir, content, message, job_here):
    test = tmp_path / "test.tsv"
    test.write_text(content)
    spec = finetune_spec(tmp_path, tiny_dir, num_train_steps=10, test_file=str(test))
    proc = job_here(spec)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert _error_lines(proc.stderr) == [f"tpuctl: error: {test} {message}"]
    assert checkpoint_steps(tmp_path / "run") == []


def test_predict_only_needs_a_fine_tuned_checkpoint(tmp_path, tiny_dir, job_here):
    """The pretrained checkpoint has no classifier head: one line, exit 2, before any step."""
    test = unlabeled_file(tmp_path, tiny_dir, lines=3)
    spec = finetune_spec(tmp_path, tiny_dir, num_train_steps=0, test_file=str(test))
    proc = job_here(spec)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert _error_lines(proc.stderr) == [
        (f"tpuctl: error: checkpoint {tiny_dir / 'bert_model.ckpt'} has no output_weights: it is "
        "not fine-tuned by bert-finetune; for a predict-only run (do_train: false) set "
        "init_checkpoint to a bert-finetune run's model_dir")]
    assert not (tmp_path / "run" / "test_results.tsv").exists()
