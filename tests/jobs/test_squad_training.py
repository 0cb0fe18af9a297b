"""The tiny SQuAD job: F1 >= 80 on its dev set, the reported F1 equals the F1 recomputed from
predictions.json, the span head keeps the original names both ways, and a killed-and-stopped run
ends with the weights of a straight one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import REPO, _from_template, job_env, read_progress, run_job

pytestmark = [pytest.mark.tf, pytest.mark.slow]

SQUAD_F1 = 80.0


def squad_spec(tmp_path: Path, tiny: Path, **overrides) -> Path:
    """templates/bert-squad-tiny.yaml on the tiny SQuAD task."""
    return _from_template("bert-squad-tiny.yaml", tmp_path / "squad.yaml", {
        "model_dir": str(tmp_path / "squad"), "bert_dir": str(tiny),
        "train_file": str(tiny / "squad" / "train-v1.1.json"),
        "predict_file": str(tiny / "squad" / "dev-v1.1.json"), **overrides})


def test_tiny_squad_reaches_f1_80_and_reports_the_f1_of_its_predictions(tmp_path, tiny_dir, job_here):
    proc = job_here(squad_spec(tmp_path, tiny_dir, eval_every_steps=100))
    assert proc.returncode == 0, proc.stderr[-3000:]
    model_dir = tmp_path / "squad"
    results = json.loads((model_dir / "eval_results.json").read_text())
    assert results["f1"] >= SQUAD_F1, results
    dev = tiny_dir / "squad" / "dev-v1.1.json"
    predictions = json.loads((model_dir / "predictions.json").read_text())
    questions = [qa["id"] for a in json.loads(dev.read_text())["data"] for p in a["paragraphs"]
                 for qa in p["qas"]]
    assert sorted(predictions) == sorted(questions)
    # The official computation from the files alone gives the very numbers the job reported.
    cli = subprocess.run([sys.executable, "-m", "jobs.bert.squad", "evaluate", str(dev),
                          str(model_dir / "predictions.json")], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=False)
    assert cli.returncode == 0, cli.stderr
    recomputed = json.loads(cli.stdout)
    assert recomputed["f1"] == results["f1"] and recomputed["exact_match"] == results["exact_match"]
    record = read_progress(model_dir)
    assert record["status"] == "finished"
    assert record["metrics"]["f1"] == results["f1"]
    assert record["metrics"]["exact_match"] == results["exact_match"]
    # Every evaluation reports what the job declares (a sweep's metric is checked against it).
    from jobs.spec import reported_metrics

    assert [e["step"] for e in record["evals"]] == [100, 200]
    assert all(set(e["metrics"]) == set(reported_metrics("bert-squad")) for e in record["evals"])
    assert record["evals"][-1]["metrics"]["f1"] == results["f1"]

    # The span head under run_squad.py's names: in the export (original layout) and in the
    # runner's checkpoints; the pooler is not trained (no gradient reaches it), as the original.
    import tensorflow as tf

    export = tf.train.load_checkpoint(str(model_dir / "export" / "bert_model.ckpt"))
    shapes = export.get_variable_to_shape_map()
    assert shapes["cls/squad/output_weights"] == [2, 32] and shapes["cls/squad/output_bias"] == [2]
    init = tf.train.load_checkpoint(str(tiny_dir / "bert_model.ckpt"))
    np.testing.assert_array_equal(export.get_tensor("bert/pooler/dense/kernel"),
                                  init.get_tensor("bert/pooler/dense/kernel"))
    assert not np.allclose(export.get_tensor("bert/encoder/layer_0/output/dense/kernel"),
                           init.get_tensor("bert/encoder/layer_0/output/dense/kernel"))

    # Predict only (do_train: false) from the export: the very predictions.json the end of
    # training wrote; and the SavedModel's span logits agree with the checkpoint's model.
    (tmp_path / "p").mkdir()
    again = job_here(squad_spec(tmp_path / "p", tiny_dir, do_train=False, train_file=None,
                               init_checkpoint=str(model_dir / "export")))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "predict only" in again.stderr
    assert (tmp_path / "p" / "squad" / "predictions.json").read_text() == \
        (model_dir / "predictions.json").read_text()
    cli = subprocess.run([sys.executable, "-m", "jobs.bert.predict", str(model_dir / "saved_model"),
                          str(dev), "--output", str(tmp_path / "cli"), "--batch-size", "5"],
                         cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120,
                         check=False)
    assert cli.returncode == 0, cli.stderr[-2000:]
    cli_answers = json.loads((tmp_path / "cli" / "predictions.json").read_text())
    assert cli_answers == json.loads((model_dir / "predictions.json").read_text())
    serve = tf.saved_model.load(str(model_dir / "saved_model")).signatures["serving_default"]
    ids = np.array([[2, 40, 41, 3, 42, 43, 44, 3, 0, 0]], np.int32)
    out = serve(input_ids=tf.constant(ids), input_mask=tf.constant((ids > 0).astype(np.int32)),
                segment_ids=tf.constant(np.array([[0] * 4 + [1] * 6], np.int32)))
    from jobs.bert import read_config, weights
    from jobs.bert.modeling import SquadModel

    model = SquadModel(read_config(str(tiny_dir)))
    weights.restore(model.original_variables(), str(model_dir / "export" / "bert_model.ckpt"))
    want = model({"token_ids": ids, "padding_mask": (ids > 0).astype(np.int32),
                  "segment_ids": np.array([[0] * 4 + [1] * 6], np.int32)})
    for key in ("start_logits", "end_logits"):
        np.testing.assert_allclose(out[key].numpy(), want[key].numpy(), atol=1e-5)


@pytest.mark.long
def test_a_run_squad_checkpoint_loads_unchanged(tmp_path, tiny_dir):
    """A checkpoint in run_squad.py's layout (bert/* and cls/squad/*) initialises every variable
    of the model, head included, and predicting with it needs no training step."""
    import tensorflow as tf

    from jobs.bert import read_config, weights
    from jobs.bert.tiny import initial_values

    config = read_config(str(tiny_dir))
    arrays = initial_values(config, seed=3)
    rng = np.random.default_rng(0)
    arrays["cls/squad/output_weights"] = rng.standard_normal((2, 32)).astype(np.float32)
    arrays["cls/squad/output_bias"] = np.array([0.5, -0.5], np.float32)
    prefix = weights.write(str(tmp_path / "run_squad" / "model.ckpt-100"), arrays)
    # On 2 CPU replicas: the prediction loop gathers every window across replicas.
    proc = run_job(squad_spec(tmp_path, tiny_dir, init_checkpoint=prefix, num_train_steps=1,
                              save_checkpoints_steps=1, steps_per_execution=1, learning_rate=1e-9,
                              warmup_proportion=0.0), env=job_env(TPUCTL_CPU_REPLICAS="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 replica(s)" in proc.stderr
    dev = json.loads((tiny_dir / "squad" / "dev-v1.1.json").read_text())
    predictions = json.loads((tmp_path / "squad" / "predictions.json").read_text())
    assert len(predictions) == sum(len(p["qas"]) for a in dev["data"] for p in a["paragraphs"])
    assert f"initialized {len(arrays) - 7} variables from" in proc.stderr  # no MLM/NSP heads
    assert "start fresh" not in proc.stderr
    out = tf.train.load_checkpoint(str(tmp_path / "squad" / "export" / "bert_model.ckpt"))
    np.testing.assert_allclose(out.get_tensor("cls/squad/output_bias"), [0.5, -0.5], atol=1e-6)


@pytest.mark.long
def test_killed_and_stopped_squad_run_ends_with_the_weights_of_a_straight_one(tmp_path, tiny_dir):
    from .test_exact_resume import checkpoint_arrays, interrupt_twice, steps_per_epoch

    total = 100
    settings = {"num_train_steps": total, "save_checkpoints_steps": 10, "steps_per_execution": 5,
                "predict_file": None}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    straight = run_job(squad_spec(tmp_path / "a", tiny_dir, **settings))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert total > 2 * steps_per_epoch(straight.stderr)   # crosses epochs
    interrupt_twice(squad_spec(tmp_path / "b", tiny_dir, **settings), tmp_path / "b" / "squad",
                    total)
    want = checkpoint_arrays(tmp_path / "a" / "squad" / f"ckpt-{total}")
    got = checkpoint_arrays(tmp_path / "b" / "squad" / f"ckpt-{total}")
    assert set(got) == set(want)
    assert [k for k in want if not np.array_equal(want[k], got[k])] == []


def test_squad_v2_job_writes_null_odds_and_the_official_v2_metrics(tmp_path, tiny_dir, job_here):
    """A v2.0 file (every third question made unanswerable): the job trains on [CLS] for those,
    writes null_odds.json, and reports HasAns/NoAns as evaluate-v2.0.py does."""
    def to_v2(name):
        raw = json.loads((tiny_dir / "squad" / name).read_text())
        raw["version"] = "v2.0"
        for i, article in enumerate(raw["data"]):
            for qa in article["paragraphs"][0]["qas"]:
                qa["is_impossible"] = i % 3 == 0
                if qa["is_impossible"]:
                    qa["plausible_answers"], qa["answers"] = qa["answers"], []
        path = tmp_path / name.replace("v1.1", "v2.0")
        path.write_text(json.dumps(raw))
        return path

    train, dev = to_v2("train-v1.1.json"), to_v2("dev-v1.1.json")
    spec = squad_spec(tmp_path, tiny_dir, train_file=str(train), predict_file=str(dev),
                      num_train_steps=20)
    refused = job_here(spec)
    assert refused.returncode == 2 and "version_2_with_negative=true" in refused.stderr
    proc = job_here(spec, "version_2_with_negative=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    model_dir = tmp_path / "squad"
    results = json.loads((model_dir / "eval_results.json").read_text())
    null_odds = json.loads((model_dir / "null_odds.json").read_text())
    predictions = json.loads((model_dir / "predictions.json").read_text())
    assert set(null_odds) == set(predictions)
    assert results["HasAns_total"] + results["NoAns_total"] == results["total"] == len(predictions)
    assert results["NoAns_total"] == 50
    cli = subprocess.run([sys.executable, "-m", "jobs.bert.squad", "evaluate", str(dev),
                          str(model_dir / "predictions.json")], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=False)
    recomputed = json.loads(cli.stdout)
    assert recomputed["f1"] == results["f1"] and recomputed["exact"] == results["exact"]
    assert read_progress(model_dir)["metrics"]["f1"] == results["f1"]
