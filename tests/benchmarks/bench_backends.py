"""BERT pretraining steps/s on the two backends of the job side, side by side in one run.

Each row is the runner's own train step of a ``bert-pretrain`` job on a synthetic batch (the
masked-LM and next-sentence objectives, our AdamW, dropout on), in a fresh process per backend
(Keras picks its backend once per process):

- ``tensorflow``: :class:`jobs.runner.runner.Runner`'s ``train_loop`` (``tf.function``, n steps
  per host call, the whole step XLA-compiled where the runner compiles it);
- ``jax``: :class:`jobs.runner.jax.runner.JaxRunner`'s step (one ``jax.jit`` over the global
  batch, dispatched step after step without waiting).

Two models: the tiny BERT the tests train (2 layers, hidden 32, seq 64) and BERT-Base (12
layers, hidden 768, seq 128, 20 predictions). Reported: steps/s and sequences/s per backend,
the first (compiling) call's seconds, and ``jax_vs_tensorflow``, the ratio of steps/s. CPU:
float32; on a GPU or TPU the runner's ``auto`` precision (bfloat16).

``python -m tests.benchmarks backends``; ``BENCH_BACKENDS_MODELS=tiny,base``,
``BENCH_BACKENDS_BATCH`` (default 8 on a CPU for BERT-Base, 32 for the tiny one) and
``BENCH_BACKENDS_STEPS`` override.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = {
    "tiny": ({"vocab_size": 160, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02},
             64, 10, 32, 40),
    "base": ({"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
              "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02},
             128, 20, 8, 4),
}  # config, seq length, predictions per sequence, CPU batch, timed steps
BACKENDS = ("tensorflow", "jax")


def run() -> dict:
    names = [m.strip() for m in (os.environ.get("BENCH_BACKENDS_MODELS") or "tiny,base").split(",")
             if m.strip()]
    report: dict = {"models": {}}
    for model in names:
        row = {backend: _child(backend, model) for backend in BACKENDS}
        row["jax_vs_tensorflow"] = round(row["jax"]["steps_per_sec"]
                                         / row["tensorflow"]["steps_per_sec"], 3)
        report["models"][model] = row
    return report


def _child(backend: str, model: str) -> dict:
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_backends", backend, model],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3600,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} {model} failed: {proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------
# Child process: one backend, one model.


def _synthetic(config: dict, seq: int, predictions: int, batch: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    half = seq // 2
    return {"token_ids": rng.integers(1, config["vocab_size"], (batch, seq)).astype(np.int32),
            "segment_ids": np.repeat([[0] * half + [1] * (seq - half)], batch, 0).astype(np.int32),
            "padding_mask": np.ones((batch, seq), np.int32),
            "masked_lm_positions": np.tile(np.linspace(1, seq - 2, predictions).astype(np.int32),
                                           (batch, 1)),
            "masked_lm_ids": rng.integers(1, config["vocab_size"], (batch, predictions)).astype(np.int32),
            "masked_lm_weights": np.ones((batch, predictions), np.float32),
            "next_sentence_labels": rng.integers(0, 2, (batch,)).astype(np.int32)}


def _job(backend: str, model: str):
    import tensorflow as tf

    from jobs.bert.pretrain import PretrainJob
    from jobs.spec import from_dict

    config, seq, predictions, cpu_batch, timed = MODELS[model]
    batch = int(os.environ.get("BENCH_BACKENDS_BATCH") or cpu_batch)
    timed = int(os.environ.get("BENCH_BACKENDS_STEPS") or timed)
    work = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    (work / "bert_config.json").write_text(json.dumps(config))
    (work / "vocab.txt").write_text("".join(f"[unused{i}]\n" for i in range(config["vocab_size"])))
    (work / "none.tfrecord").write_text("")
    spec = from_dict({"job": "bert-pretrain", "model_dir": str(work / "run"), "bert_dir": str(work),
                      "input_files": str(work / "none.tfrecord"), "init_checkpoint": "none",
                      "train_batch_size": batch, "num_train_steps": 100000,
                      "max_seq_length": seq, "max_predictions_per_seq": predictions,
                      "backend": backend})
    data = _synthetic(config, seq, predictions, batch)

    class Synthetic(PretrainJob):
        def prepare(self, ctx):
            from jobs.bert import read_config

            self.config = read_config(str(work))

        def dataset(self, ctx, position):
            share = ctx.get_per_replica_batch_size(batch)
            return tf.data.Dataset.from_tensors({k: v[:share] for k, v in data.items()}).repeat()

    return spec, Synthetic(spec), batch, timed


def _bench_tensorflow(model: str) -> dict:
    import tensorflow as tf

    from jobs.runner import distribute
    from jobs.runner.runner import Runner

    spec, job, batch, timed = _job("tensorflow", model)
    runner = Runner(spec, job)
    runner.connect()
    distribute.set_policy(runner.device.precision)
    job.prepare(runner.make_context())
    runner.build()
    loop = runner.make_train_loop(tf.Variable(False), tf.Variable(0, dtype=tf.int64))
    iterator = iter(runner.strategy.distribute_datasets_from_function(lambda ctx: job.dataset(ctx, 0)))
    start = time.perf_counter()
    float(loop(iterator, tf.constant(1))[0].numpy())
    first = time.perf_counter() - start
    start = time.perf_counter()
    loss = float(loop(iterator, tf.constant(timed))[0].numpy()) / timed
    return _result(runner, batch, timed, time.perf_counter() - start, first, loss)


def _bench_jax(model: str) -> dict:
    import numpy as np

    from jobs.runner import distribute
    from jobs.runner.jax import devices
    from jobs.runner.jax.runner import JaxRunner

    spec, job, batch, timed = _job("jax", model)
    runner = JaxRunner(spec, job)
    runner.connect()
    distribute.set_policy(runner.device.precision)
    job.prepare(runner.make_context())
    runner.build()
    step = runner.make_train_step()
    local = next(iter(job.dataset(runner.input_context(), 0)))
    batch_array = devices.global_batch(runner.mesh, {k: v.numpy() for k, v in local.items()})

    def steps(n: int) -> float:
        losses = []
        for _ in range(n):
            (runner.train_values, runner.other_values, runner.slots, loss,
             _) = step(runner.train_values, runner.other_values, runner.slots,
                       np.int32(runner.step), batch_array)
            runner.step += 1
            losses.append(loss)
        return sum(float(x) for x in losses) / n  # waits for the last step

    start = time.perf_counter()
    steps(1)
    first = time.perf_counter() - start
    start = time.perf_counter()
    loss = steps(timed)
    return _result(runner, batch, timed, time.perf_counter() - start, first, loss)


def _result(runner, batch: int, steps: int, elapsed: float, first: float, loss: float) -> dict:
    device = runner.device
    return {"backend": runner.backend, "device": device.name, "replicas": device.count,
            "precision": device.precision, "global_batch": batch, "timed_steps": steps,
            "steps_per_sec": round(steps / elapsed, 3),
            "sequences_per_sec": round(steps * batch / elapsed, 2),
            "first_call_s": round(first, 2), "loss": round(loss, 4)}


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    backend, model = sys.argv[1], sys.argv[2]
    sys.path.insert(0, str(REPO))
    result = _bench_tensorflow(model) if backend == "tensorflow" else _bench_jax(model)
    print(json.dumps(result))
