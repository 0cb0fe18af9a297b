"""The BERT jobs on Keras 3's JAX backend (``backend: jax``), each run a program of its own
(Keras picks its backend once per process), JAX on the CPU:

- pretraining killed (SIGKILL) and stopped (SIGTERM), resumed each time, ends with the weights of
  an uninterrupted JAX run, bitwise;
- two processes of four virtual devices each (``jax.distributed``, as the local provider's
  emulated slices run hosts) train what one process on one device trains, to float noise: far
  below another seed's distance, the tolerance the TensorFlow path meets
  (tests/jobs/test_topology.py);
- a checkpoint written on one backend continues on the other, both ways;
- fine-tuning from the original checkpoint reaches the accuracy the TensorFlow path is held to,
  and the SavedModel a JAX run exports serves the JAX run's own probabilities;
- SQuAD predictions of one trained model from both backends agree.
"""

from __future__ import annotations

import json
import re
import socket

import numpy as np
import pytest

from tests.benchmarks.bench_topology import distance, final_weights

from .conftest import finetune_spec, job_env, pretrain_spec, read_progress, run_job, start_job
from .test_exact_resume import SETTINGS, checkpoint_arrays, interrupt_twice
from .test_predict import predict_cli, unlabeled_file
from .test_squad_training import squad_spec
from .test_training import FINETUNE_ACCURACY

pytestmark = [pytest.mark.tf, pytest.mark.slow]

JAX = ("backend=jax",)


@pytest.mark.long
def test_a_jax_pretraining_killed_and_stopped_ends_with_the_weights_of_an_uninterrupted_one(tmp_path, tiny_dir):
    total = 40
    for name in ("a", "b"):
        (tmp_path / name).mkdir()

    def spec(name):
        return pretrain_spec(tmp_path / name, tiny_dir, num_train_steps=total, backend="jax",
                             eval_batch_size=8, max_eval_steps=1, export_bert_dir=False, **SETTINGS)

    straight = run_job(spec("a"), timeout=600)
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "jobs: backend jax (set in the spec)" in straight.stdout
    assert re.search(r"bert-pretrain on CPU: 1 replica\(s\), float32, XLA, jax", straight.stderr)

    killed_at, stopped_at, _ = interrupt_twice(spec("b"), tmp_path / "b" / "pretrain", total)
    want = checkpoint_arrays(tmp_path / "a" / "pretrain" / f"ckpt-{total}")
    got = checkpoint_arrays(tmp_path / "b" / "pretrain" / f"ckpt-{total}")
    assert set(got) == set(want) and any(k.startswith("optimizer/") for k in want)
    differing = [k for k in want if not np.array_equal(want[k], got[k])]
    assert differing == [], f"killed at {killed_at}, stopped at {stopped_at}: {differing[:5]}"


@pytest.mark.long
def test_two_jax_processes_of_four_devices_train_what_one_device_trains(tmp_path, tiny_dir):
    steps = 12
    common = {"num_train_steps": steps, "save_checkpoints_steps": steps, "steps_per_execution": 4,
              "eval_batch_size": 8, "max_eval_steps": 1, "export_bert_dir": False, "backend": "jax"}
    for name in ("one", "hosts", "other-seed"):
        (tmp_path / name).mkdir()
    assert run_job(pretrain_spec(tmp_path / "one", tiny_dir, **common), timeout=600).returncode == 0
    other = run_job(pretrain_spec(tmp_path / "other-seed", tiny_dir, **common), "seed=7", timeout=600)
    assert other.returncode == 0, other.stderr[-3000:]

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = {"worker": [f"127.0.0.1:{port}", "127.0.0.1:1"]}
    spec = pretrain_spec(tmp_path / "hosts", tiny_dir, **common)
    procs = [start_job(spec, env=job_env(TPUCTL_CPU_REPLICAS="4", TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": i}}))) for i in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    assert "on CPU (8 devices): 8 replica(s)" in outs[0]
    assert read_progress(tmp_path / "hosts" / "pretrain")["device"]["count"] == 8

    one = final_weights(tmp_path / "one" / "pretrain")
    same = distance(one, final_weights(tmp_path / "hosts" / "pretrain"))
    seed = distance(one, final_weights(tmp_path / "other-seed" / "pretrain"))
    assert same["max"] < seed["max"] / 100 and same["all"] < seed["all"] / 100, (same, seed)


@pytest.mark.long
def test_a_checkpoint_of_one_backend_continues_on_the_other(tmp_path, tiny_dir):
    """TensorFlow to step 10, JAX to 20, TensorFlow to 30: each resumes the other's checkpoint
    (weights, moments, step, input position) and trains on."""
    spec = pretrain_spec(tmp_path, tiny_dir, num_train_steps=30, save_checkpoints_steps=10,
                         steps_per_execution=5, eval_batch_size=8, max_eval_steps=1,
                         export_bert_dir=False)
    keys = None
    for backend, start, end in (("tensorflow", 0, 10), ("jax", 10, 20), ("tensorflow", 20, 30)):
        proc = run_job(spec, f"backend={backend}", f"num_train_steps={end}", timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"jobs: backend {backend} (set in the spec)" in proc.stdout
        if start:
            assert (f"resumed from {tmp_path / 'pretrain' / f'ckpt-{start}'} (step {start}); "
                    f"input stream at example {start * 16}") in proc.stderr, proc.stderr[-2000:]
        saved = checkpoint_arrays(tmp_path / "pretrain" / f"ckpt-{end}")
        assert keys is None or set(saved) == keys
        keys = set(saved)
        assert int(saved["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == end
        losses = [float(x) for x in re.findall(rf"step \d+/{end} loss ([\d.]+)", proc.stderr)]
        assert losses and max(losses) < 6.0, proc.stderr[-2000:]   # from 10.4 untrained: it trained on


@pytest.mark.long
def test_jax_finetuning_reaches_the_tensorflow_accuracy_and_its_savedmodel_serves_it(tmp_path, tiny_dir):
    """The tiny fine-tuning template from the original checkpoint on JAX: the dev accuracy the
    TensorFlow path is held to (tests/jobs/test_training.py, FINETUNE_ACCURACY); the JAX run's
    SavedModel (written by a TensorFlow process from its weights) serves its probabilities."""
    test = unlabeled_file(tmp_path, tiny_dir)
    proc = run_job(finetune_spec(tmp_path, tiny_dir, backend="jax", test_file=str(test)), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    results = json.loads((run / "eval_results.json").read_text())
    assert results["eval_examples"] == 160 and results["eval_accuracy"] >= FINETUNE_ACCURACY, results

    job_probs = np.array([line.split("\t") for line in (run / "test_results.tsv").read_text().splitlines()],
                         np.float64)
    cli = predict_cli(str(run / "saved_model"), str(test), "--output", str(tmp_path / "served"))
    assert cli.returncode == 0, cli.stderr[-2000:]
    served = np.array([line.split("\t") for line in
                       (tmp_path / "served" / "test_results.tsv").read_text().splitlines()], np.float64)
    np.testing.assert_allclose(served, job_probs, atol=1e-5)


@pytest.mark.long
def test_squad_predictions_of_one_model_agree_on_both_backends(tmp_path, tiny_dir):
    """A SQuAD model trained on TensorFlow predicts at its end; the same model_dir predicted on
    JAX (do_train: false: the model comes from the job's initialize, not from a checkpoint the
    runner resumes) gives the same answers."""
    (tmp_path / "tf").mkdir()
    trained = run_job(squad_spec(tmp_path / "tf", tiny_dir, num_train_steps=60,
                                 save_checkpoints_steps=60, steps_per_execution=20), timeout=900)
    assert trained.returncode == 0, trained.stderr[-3000:]
    model_dir = tmp_path / "tf" / "squad"
    on_tf = json.loads(next(model_dir.rglob("predictions.json")).read_text())
    (tmp_path / "jax").mkdir()
    proc = run_job(squad_spec(tmp_path / "jax", tiny_dir, do_train=False, backend="jax",
                              init_checkpoint=str(model_dir)), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    on_jax = json.loads(next((tmp_path / "jax" / "squad").rglob("predictions.json")).read_text())
    assert len(on_tf) > 10 and on_jax == on_tf
