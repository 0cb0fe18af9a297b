"""`job: keras` end to end on the local provider: a user's Keras model from a directory outside
the repository, staged with `tpuctl train --workdir`, preempted with `tpuctl simulate preempt` and
resumed, ends bitwise with the weights of an uninterrupted run; on an emulated v2-32 (4 hosts)
it ends with the weights of one host up to float noise. A mistake in the user's code is refused
before a run exists; a sweep sweeps the user's params."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

pytestmark = [pytest.mark.xdist_group("tf")]

EXAMPLE = REPO / "examples" / "mlp"
STEPS, CKPT = 200, 50
# The user's own module beside the example's (a sibling import): the example's train split, one
# batch every 20 ms, so a preemption lands mid-run on any machine; it prints the attempt it is
# told it runs in (docs/own-code.md's contract: 0 for the first).
TRAINER = """
import os
import time

import tensorflow as tf

from model import dataset as example_dataset, loss, metrics, model, predict  # noqa: F401


def dataset(params, split, context):
    batches = example_dataset(params, split, context)
    if split != "train":
        return batches
    print("TPUCTL_ATTEMPT=" + os.environ.get("TPUCTL_ATTEMPT", "unset"), flush=True)

    def paced(features, labels):
        slowed = tf.numpy_function(lambda x: (time.sleep(0.02), x)[1], [features], tf.float32)
        return tf.ensure_shape(slowed, [params["batch_size"], params["features"]]), labels

    return batches.map(paced)
"""


def user_dir(tmp_path: Path) -> Path:
    """The example as a user keeps it: a directory of their own, outside the repository."""
    code = tmp_path / "my-model"
    code.mkdir()
    shutil.copy(EXAMPLE / "model.py", code / "model.py")
    (code / "trainer.py").write_text(TRAINER)
    spec = (EXAMPLE / "spec.yaml").read_text().replace("module: model.py", "module: trainer.py")
    (code / "spec.yaml").write_text(spec)
    return code


def checkpoint(prefix: Path) -> dict[str, np.ndarray]:
    """Weights, Adam moments, step and input position (not save_counter: the runs saved
    different numbers of times)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if not k.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def _progress(model_dir: Path | None) -> dict:
    try:
        return json.loads((model_dir / "progress.json").read_text()) if model_dir else {}
    except (OSError, ValueError):
        return {}


def _run_dir(home: Path) -> Path | None:
    runs = sorted((home / "runs").glob("*.json")) if (home / "runs").is_dir() else []
    if not runs:
        return None
    run_id = json.loads(runs[-1].read_text())["run_id"]
    return home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id


@pytest.mark.tf
def test_a_users_keras_model_from_outside_the_repository_resumes_bitwise_after_a_preemption(tmp_path):
    home = Path(os.environ["TPUCTL_HOME"])
    code = user_dir(tmp_path)
    sets = ["--set", f"num_train_steps={STEPS}", "--set", f"save_checkpoints_steps={CKPT}"]
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    proc = subprocess.Popen([str(TPUCTL_BIN), "train", "lab", "--job", str(code / "spec.yaml"), "--workdir",
                             str(code), *sets, "--poll", "1", "--json"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TPUCTL_HEARTBEAT_SECONDS": "0.5"})
    # the uninterrupted run, meanwhile: the same spec and code, run here without a supervisor
    straight = subprocess.Popen([str(TPUCTL_BIN), "job", "run", str(code / "spec.yaml"), *sets, "--set",
                                 f"model_dir={tmp_path / 'straight'}"], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "TPUCTL_DEVICE": "cpu"})
    run_dir, preempted = None, False
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and not preempted:
        time.sleep(0.2)
        run_dir = run_dir or _run_dir(home)
        p = _progress(run_dir / "model" if run_dir else None)
        if (p.get("checkpoint_step") or 0) >= CKPT and (p.get("step") or 0) < STEPS - CKPT:
            preempted = run_tpuctl_process("simulate", "preempt", "lab").code == 0
    out, err = proc.communicate(timeout=300)
    assert preempted, err[-3000:]
    run = json.loads(out)["run"]
    assert run["status"] == "finished" and run["last_progress"]["step"] == STEPS, err[-3000:]
    assert run["preemptions"] == 1 and run["attempts"] == 2
    assert (home / "host" / "work" / run["run_id"] / "0" / "code" / "trainer.py").exists()  # the code went with it
    events = run_tpuctl_process("logs", run["run_id"], "--events").out
    assert "resumed" in events and "preempted" in events
    log = run_tpuctl_process("logs", run["run_id"], "--attempt", "2").out
    assert f"resumed from {run_dir / 'model'}/ckpt-" in log
    # the attempt a Keras job is told counts from 0, as a program's does
    first = run_tpuctl_process("logs", run["run_id"], "--attempt", "1").out
    assert ("TPUCTL_ATTEMPT=0" in first and "TPUCTL_ATTEMPT=1" in log), (first[-2000:], log[-2000:])

    assert straight.wait(timeout=300) == 0, straight.stderr.read()[-3000:]
    resumed = checkpoint(run_dir / "model" / f"ckpt-{STEPS}")
    uninterrupted = checkpoint(tmp_path / "straight" / f"ckpt-{STEPS}")
    assert sorted(resumed) == sorted(uninterrupted)
    assert [k for k in resumed if not np.array_equal(resumed[k], uninterrupted[k])] == []
    # what the run left for the user: predictions of the predict split, an export, the evaluation
    final = _progress(run_dir / "model")
    assert final["metrics"]["eval_accuracy"] > 0.9 and {"predictions.jsonl", "saved_model/"} <= set(final["outputs"])
    rows = (run_dir / "model" / "predictions.jsonl").read_text().splitlines()
    assert len(rows) == 100 and set(json.loads(rows[0])) == {"label", "probabilities"}


def test_a_mistake_in_the_users_code_is_refused_before_a_run_exists(tmp_path):
    """The control plane reads the module (without TensorFlow) before anything is staged."""
    home = Path(os.environ["TPUCTL_HOME"])
    code = user_dir(tmp_path)
    (code / "trainer.py").write_text(TRAINER.replace("def dataset(params, split, context):",
                                                     "def dataset(params, split):"))
    assert run_tpuctl_process("up", "lab").code == 0
    r = run_tpuctl_process("train", "lab", "--job", str(code / "spec.yaml"), "--workdir", str(code))
    assert r.code == 2
    line = TRAINER.splitlines().index("def dataset(params, split, context):") + 1
    assert r.err.strip().splitlines()[-1] == (
        f"tpuctl: error: {code}/trainer.py:{line}: dataset() takes 2 arguments but the runner calls "
        "dataset(params, split, context); define it as def dataset(params, split, context)")
    assert not (home / "runs").exists() or not list((home / "runs").glob("*.json"))
    # a module the code directory does not hold
    r = run_tpuctl_process("train", "lab", "--job", str(code / "spec.yaml"), "--workdir", str(tmp_path))
    assert r.code == 2 and f"module trainer.py not found in {tmp_path}" in r.err


def test_tf_ops_in_a_module_for_the_jax_backend_are_refused_before_a_run_exists(tmp_path):
    """backend: jax and a loss written with tf.*: train reads the module without importing it
    and names the first tf. call the device would run, with its keras.ops fix, exit 2."""
    home = Path(os.environ["TPUCTL_HOME"])
    code = user_dir(tmp_path)
    source = (code / "model.py").read_text()
    old = '    return {"accuracy": keras.ops.cast(keras.ops.equal(predicted, labels), "float32")}'
    assert source.count(old) == 1
    (code / "model.py").write_text(source.replace(
        old, '    return {"accuracy": tf.cast(tf.equal(predicted, labels), tf.float32)}'))
    line = next(i for i, text in enumerate((code / "model.py").read_text().splitlines(), 1)
                if "tf.cast(tf.equal" in text)
    assert run_tpuctl_process("up", "lab").code == 0
    r = run_tpuctl_process("train", "lab", "--job", str(code / "spec.yaml"), "--workdir", str(code),
                           "--set", "backend=jax")
    assert r.code == 2, r.err
    assert r.err.strip().splitlines()[-1].startswith(
        f"tpuctl: error: {code}/model.py:{line}: tf.cast in metrics() is TensorFlow, which the jax "
        "backend cannot run; use keras.ops.cast")
    assert not (home / "runs").exists() or not list((home / "runs").glob("*.json"))
    # the same module on TensorFlow is fine: the dry run goes through
    r = run_tpuctl_process("train", "lab", "--job", str(code / "spec.yaml"), "--workdir", str(code),
                           "--set", "backend=tensorflow", "--dry-run")
    assert r.code == 0, r.err


def test_a_sweep_sweeps_the_users_params_and_names_their_metrics(tmp_path):
    code = tmp_path / "mlp"
    shutil.copytree(EXAMPLE, code)
    sweep = tmp_path / "sweep.yaml"
    body = ("job: {job}\nmetric: {metric}\ngoal: maximize\nmethod: grid\n"
            "parameters:\n  {name}: {{values: [8, 32]}}\n")
    sweep.write_text(body.format(job=code / "spec.yaml", metric="eval_accuracy", name="params.hidden"))
    r = run_tpuctl_process("sweep", str(sweep), "--dry-run")
    assert r.code == 0 and "would run up to 2 trial(s) of grid search" in r.out, r.err
    sweep.write_text(body.format(job=code / "spec.yaml", metric="eval_accuracy", name="params.hiden"))
    r = run_tpuctl_process("sweep", str(sweep), "--dry-run")
    assert r.code == 2 and "parameter 'params.hiden' is not a key of the job spec; did you mean params.hidden?" in r.err
    # what metrics() returns (eval_accuracy) and the loss are what a sweep may optimise
    sweep.write_text(body.format(job=code / "spec.yaml", metric="accuracy", name="params.hidden"))
    r = run_tpuctl_process("sweep", str(sweep), "--dry-run")
    assert r.code == 2 and "use one of eval_loss, eval_accuracy" in r.err


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.long
def test_the_same_keras_spec_on_an_emulated_v2_32_ends_with_the_one_host_weights(tmp_path):
    """4 hosts (4 processes joined over TF_CONFIG), each reading its quarter of every global
    batch: the weights of one host up to float noise, 1/100 of another seed's distance at most
    (the tolerance of the BERT slices, tests/e2e/test_multihost_local.py)."""
    from tests.benchmarks.bench_topology import distance, final_weights

    code = tmp_path / "mlp"
    shutil.copytree(EXAMPLE, code)
    spec = ["--job", str(code / "spec.yaml"), "--workdir", str(code), "--set", "num_train_steps=60"]
    assert run_tpuctl_process("up", "pod", "--accelerator-type", "v2-32").code == 0
    r = run_tpuctl_process("train", "pod", *spec, "--poll", "1", "--json", timeout=300)
    assert r.code == 0, r.err[-3000:]
    run = r.json()["run"]
    assert run["status"] == "finished", run
    assert "CPU x 4 workers: 4 replica(s)" in run_tpuctl_process("logs", run["run_id"], "--worker", "3").out
    pod = Path(run["model_dir"])
    singles = {name: subprocess.Popen([str(TPUCTL_BIN), "job", "run", str(code / "spec.yaml"),
                                       "--set", "num_train_steps=60", "--set", f"model_dir={tmp_path / name}",
                                       *extra], stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, "TPUCTL_DEVICE": "cpu"})
               for name, extra in (("one-host", ()), ("other-seed", ("--set", "seed=7")))}
    for proc in singles.values():
        assert proc.wait(timeout=300) == 0, proc.stderr.read()[-3000:]
    one = final_weights(tmp_path / "one-host")
    same = distance(one, final_weights(pod))
    other = distance(one, final_weights(tmp_path / "other-seed"))
    assert same["max"] < other["max"] / 100 and same["all"] < other["all"] / 100, (same, other)
