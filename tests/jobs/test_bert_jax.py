"""The BERT jobs on Keras 3's JAX backend (``backend: jax``), each run a program of its own
(Keras picks its backend once per process), JAX on the CPU:

- pretraining killed (SIGKILL) and stopped (SIGTERM), resumed each time, ends with the weights of
  an uninterrupted JAX run, bitwise;
- two processes of four virtual devices each (``jax.distributed``, as the local provider's
  emulated slices run hosts) train what one process on one device trains, to float noise: far
  below another seed's distance, the tolerance the TensorFlow path meets
  (tests/jobs/test_topology.py);
- a checkpoint written on one backend continues on the other, both ways;
- fine-tuning from the original checkpoint reaches the accuracy the TensorFlow path reaches, and
  the SavedModel a JAX run exports serves the JAX run's own probabilities;
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

pytestmark = [pytest.mark.tf, pytest.mark.slow]

JAX = ("backend=jax",)


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
@pytest.mark.parametrize("first,then", [("tensorflow", "jax"), ("jax", "tensorflow")])
def test_a_checkpoint_of_one_backend_continues_on_the_other(tmp_path, tiny_dir, first, then):
    spec = pretrain_spec(tmp_path, tiny_dir, num_train_steps=20, save_checkpoints_steps=10,
                         steps_per_execution=5, eval_batch_size=8, max_eval_steps=1,
                         export_bert_dir=False)
    begun = run_job(spec, f"backend={first}", "num_train_steps=10", timeout=600)
    assert begun.returncode == 0, begun.stderr[-3000:]
    before = checkpoint_arrays(tmp_path / "pretrain" / "ckpt-10")
    resumed = run_job(spec, f"backend={then}", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"jobs: backend {then} (set in the spec)" in resumed.stdout
    assert f"resumed from {tmp_path / 'pretrain' / 'ckpt-10'} (step 10); input stream at example" in resumed.stderr
    after = checkpoint_arrays(tmp_path / "pretrain" / "ckpt-20")
    assert set(after) == set(before)
    assert int(after["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 20
    losses = [float(x) for x in re.findall(r"step \d+/20 loss ([\d.]+)", resumed.stderr)]
    assert losses and all(np.isfinite(losses)) and max(losses) < 8.0, resumed.stderr[-2000:]


@pytest.mark.long
def test_jax_finetuning_reaches_the_tensorflow_accuracy_and_its_savedmodel_serves_it(tmp_path, tiny_dir):
    test = unlabeled_file(tmp_path, tiny_dir)
    results = {}
    for backend in ("tensorflow", "jax"):
        (tmp_path / backend).mkdir()
        spec = finetune_spec(tmp_path / backend, tiny_dir, backend=backend, test_file=str(test))
        proc = run_job(spec, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[backend] = json.loads((tmp_path / backend / "run" / "eval_results.json").read_text())
    # the same recipe from the same original checkpoint; other dropout masks (threefry, not
    # Philox), so the same accuracy within noise, not the same digits
    assert results["jax"]["eval_accuracy"] >= 0.9, results
    assert abs(results["jax"]["eval_accuracy"] - results["tensorflow"]["eval_accuracy"]) <= 0.05, results

    # the SavedModel of the JAX run (written by a TensorFlow process from the JAX weights)
    # serves the probabilities the JAX run wrote
    run = tmp_path / "jax" / "run"
    job_probs = np.array([line.split("\t") for line in (run / "test_results.tsv").read_text().splitlines()],
                         np.float64)
    cli = predict_cli(str(run / "saved_model"), str(test), "--output", str(tmp_path / "served"))
    assert cli.returncode == 0, cli.stderr[-2000:]
    served = np.array([line.split("\t") for line in
                       (tmp_path / "served" / "test_results.tsv").read_text().splitlines()], np.float64)
    np.testing.assert_allclose(served, job_probs, atol=1e-5)


@pytest.mark.long
def test_squad_predictions_of_one_model_agree_on_both_backends(tmp_path, tiny_dir):
    (tmp_path / "train").mkdir()
    trained = run_job(squad_spec(tmp_path / "train", tiny_dir, num_train_steps=40,
                                 save_checkpoints_steps=40, steps_per_execution=20), timeout=900)
    assert trained.returncode == 0, trained.stderr[-3000:]
    model_dir = tmp_path / "train" / "squad"
    predictions = {}
    for backend in ("tensorflow", "jax"):
        (tmp_path / backend).mkdir()
        spec = squad_spec(tmp_path / backend, tiny_dir, do_train=False, backend=backend,
                          init_checkpoint=str(model_dir))
        proc = run_job(spec, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        predictions[backend] = json.loads(next((tmp_path / backend).rglob("predictions.json")).read_text())
    assert predictions["jax"] == predictions["tensorflow"]
