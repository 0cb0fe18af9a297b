"""BERT-base pretraining throughput at seq 128: tpuctl's runner next to a plain Keras reference.

Both train BERT-base (12 layers, hidden 768, 12 heads, vocab 30522) on the masked-LM (20
predictions) and next-sentence objectives, from the same synthetic batch, with AdamW, at the same
batch size and precision, on the same machine, each in a fresh process:

- ``runner``: :class:`jobs.runner.runner.Runner` -- the model of :mod:`jobs.bert.modeling`, our AdamW,
  the very ``train_loop`` a ``bert-pretrain`` job runs (n steps per host call);
- ``keras_fit``: the reference a Keras user would write first: the encoder from stock Keras
  layers (``Embedding``, ``MultiHeadAttention``, ``Dense``, ``LayerNormalization``) trained with
  ``model.fit`` and ``keras.optimizers.AdamW`` (Keras' default ``jit_compile="auto"``). It is
  independent of our code, needs nothing beyond the Keras that TensorFlow ships, and measures
  what the runner's own loop costs or saves against the standard path.

Variants: each implementation in float32, in bfloat16 (mixed precision) and in bfloat16 with
XLA (the runner compiles its whole train step, AdamW included; ``model.fit`` gets
``jit_compile=True``). On a GPU all three run; on a CPU only float32 by default (bfloat16 is
emulated there and says nothing). ``BENCH_TRAIN_VARIANTS=fp32,bf16,bf16_xla,fp32_xla`` chooses.

Reported: sequences/s, and model FLOP/s as a fraction of the hardware's peak (MFU), with 85.9 GFLOP
per sequence (6 x 110M parameters x 128 tokens + attention; ``BertConfig.train_flops_per_sequence``).
The CPU peak is derived from /proc/cpuinfo (cores x clock x FLOP/cycle of the widest FMA units:
AVX-512 64, AVX2 32 fp32 FLOP/cycle/core, assuming two FMA ports) and also measured as a large
float32 matmul; the higher of the two is the peak (the nominal clock in /proc/cpuinfo is often
below the boost clock the matmul runs at), and both fractions are shown. On a GPU: bfloat16 on compute capability >= 8.0,
peak from a table of dense bf16 tensor-core figures (``GPU_PEAK_BF16``), falling back to the
measured matmul.

``python -m tests.benchmarks train`` runs it (a few minutes on 2 cores); environment overrides:
``BENCH_TRAIN_BATCH``, ``BENCH_TRAIN_STEPS``, ``BENCH_TRAIN_VARIANTS``.
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
SEQ, PREDICTIONS = 128, 20
BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02}

# Dense bf16 tensor-core peaks (no sparsity), per GPU, from the vendors' data sheets.
GPU_PEAK_BF16 = {"H200": 989e12, "H100 SXM": 989e12, "H100 80GB HBM3": 989e12,
                 "H100 PCIe": 756e12, "H100": 756e12, "A100": 312e12, "L40S": 362e12,
                 "L4": 121e12, "A10": 125e12, "V100": 125e12, "T4": 65e12}


VARIANTS = {"fp32": ("float32", False), "bf16": ("bfloat16", False),
            "bf16_xla": ("bfloat16", True), "fp32_xla": ("float32", True)}
IMPLEMENTATIONS = ("runner", "keras_fit")


def run() -> dict:
    peak = _child("peak")
    default = "fp32,bf16,bf16_xla" if peak["device_type"] == "gpu" else "fp32"
    names = [v.strip() for v in (os.environ.get("BENCH_TRAIN_VARIANTS") or default).split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise ValueError(f"BENCH_TRAIN_VARIANTS: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    flops_per_seq = _flops_per_sequence()
    report = {"model": "BERT-base", "seq_length": SEQ, "predictions_per_seq": PREDICTIONS,
              "gflop_per_sequence": round(flops_per_seq / 1e9, 1), **peak, "variants": {}}
    for variant in names:
        precision, xla = VARIANTS[variant]
        row = {}
        for impl in IMPLEMENTATIONS:
            r = _child(impl, precision, xla)
            flops = r["sequences_per_sec"] * flops_per_seq
            r["model_tflops"] = round(flops / 1e12, 4)
            r["fraction_of_peak"] = round(flops / peak["peak_flops"], 4)  # MFU
            r["fraction_of_measured_matmul"] = round(flops / peak["measured_matmul_flops"], 4)
            row[impl] = r
        row["runner_vs_reference"] = round(row["runner"]["sequences_per_sec"]
                                           / row["keras_fit"]["sequences_per_sec"], 3)
        report["variants"][variant] = row
    first = report["variants"][names[0]]  # the keys earlier reports had
    report.update(runner=first["runner"], keras_fit=first["keras_fit"],
                  runner_vs_reference=first["runner_vs_reference"])
    return report


def _flops_per_sequence() -> float:
    sys.path.insert(0, str(REPO))
    from jobs.bert.config import BertConfig

    return BertConfig.from_dict(BASE).train_flops_per_sequence(SEQ)


def _child(mode: str, precision: str = "auto", xla: bool = False) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TPUCTL_XLA="1" if xla else "0")
    proc = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_train", mode, precision],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} {precision} xla={xla} failed: {proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------
# Child process: one implementation (or the peak measurement) in a fresh TensorFlow.


def _settings(device_type: str, replicas: int) -> tuple[int, int, int]:
    """(global batch, warm-up steps, timed steps)."""
    per_device, warm, timed = (4, 1, 3) if device_type == "cpu" else (32, 10, 30)
    batch = int(os.environ.get("BENCH_TRAIN_BATCH") or per_device * replicas)
    timed = int(os.environ.get("BENCH_TRAIN_STEPS") or timed)
    return batch, warm, timed


def _synthetic_batch(batch: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return {"token_ids": rng.integers(1, BASE["vocab_size"], (batch, SEQ)).astype(np.int32),
            "segment_ids": np.repeat([[0] * 64 + [1] * 64], batch, 0).astype(np.int32),
            "padding_mask": np.ones((batch, SEQ), np.int32),
            "masked_lm_positions": np.tile(np.arange(1, 121, 6, dtype=np.int32), (batch, 1)),
            "masked_lm_ids": rng.integers(1, BASE["vocab_size"], (batch, PREDICTIONS)).astype(np.int32),
            "masked_lm_weights": np.ones((batch, PREDICTIONS), np.float32),
            "next_sentence_labels": rng.integers(0, 2, (batch,)).astype(np.int32)}


def _device():
    from jobs.runner import distribute

    precision = sys.argv[2] if len(sys.argv) > 2 else "auto"
    return distribute.select(precision)


def _bench_runner() -> dict:
    import tensorflow as tf

    from jobs.bert.pretrain import PretrainJob
    from jobs.runner import distribute
    from jobs.runner.runner import Runner
    from jobs.spec import from_dict

    strategy, device = _device()
    batch, warm, timed = _settings(device.type, strategy.num_replicas_in_sync)
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    (work / "bert_config.json").write_text(json.dumps(BASE))
    (work / "vocab.txt").write_text("".join(f"[unused{i}]\n" for i in range(BASE["vocab_size"])))
    (work / "none.tfrecord").write_text("")
    spec = from_dict({"job": "bert-pretrain", "model_dir": str(work / "run"), "bert_dir": str(work),
                      "input_files": str(work / "none.tfrecord"), "init_checkpoint": "none",
                      "train_batch_size": batch, "num_train_steps": 1000,
                      "precision": device.precision})
    data = _synthetic_batch(batch)

    class Synthetic(PretrainJob):
        def prepare(self, ctx):
            from jobs.bert import read_config

            self.config = read_config(str(work))

        def dataset(self, ctx, position):
            per_replica = ctx.get_per_replica_batch_size(batch)
            return tf.data.Dataset.from_tensors({k: v[:per_replica] for k, v in data.items()}).repeat()

    job = Synthetic(spec)
    runner = Runner(spec, job)
    runner.strategy, runner.device = strategy, device
    distribute.set_policy(device.precision)
    job.prepare(runner.make_context())
    runner.build()
    loop = runner.make_train_loop(tf.Variable(False), tf.Variable(0, dtype=tf.int64))
    iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: job.dataset(ctx, 0)))
    xla = "whole step XLA-compiled" if device.xla else "no XLA"
    start = time.perf_counter()
    float(loop(iterator, tf.constant(warm))[0].numpy())
    first = time.perf_counter() - start
    start = time.perf_counter()
    loss = float(loop(iterator, tf.constant(timed))[0].numpy()) / timed
    elapsed = time.perf_counter() - start
    return _result("runner", device, batch, timed, elapsed, first, loss,
                   notes=f"jobs.runner.runner train_loop, one host call for the timed steps, {xla}")


def _bench_keras_fit() -> dict:
    import keras
    import tensorflow as tf

    strategy, device = _device()
    batch, warm, timed = _settings(device.type, strategy.num_replicas_in_sync)
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if device.precision == "bfloat16"
                                            else "float32")
    data = _synthetic_batch(batch)
    features = {k: data[k] for k in ("token_ids", "segment_ids", "padding_mask",
                                     "masked_lm_positions")}
    labels = {"mlm": data["masked_lm_ids"], "nsp": data["next_sentence_labels"]}
    dataset = tf.data.Dataset.from_tensors((features, labels)).repeat()
    spe = 1 if device.type == "cpu" else timed
    jit = True if device.xla else ("auto" if device.type == "gpu" else False)
    with strategy.scope():
        model = _keras_bert()
        model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01,
                                                       epsilon=1e-6, global_clipnorm=1.0),
                      loss={"mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                            "nsp": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
                      steps_per_execution=spe, jit_compile=jit)
    start = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=max(warm, spe), verbose=0)
    first = time.perf_counter() - start
    start = time.perf_counter()
    history = model.fit(dataset, epochs=1, steps_per_epoch=timed, verbose=0)
    elapsed = time.perf_counter() - start
    return _result("keras_fit", device, batch, timed, elapsed, first,
                   float(history.history["loss"][-1]),
                   notes=f"stock Keras layers + model.fit, steps_per_execution={spe}, "
                         f"jit_compile={getattr(model, 'jit_compile', 'auto')}")


def _keras_bert():
    """BERT-base from stock Keras layers, MLM and NSP heads: the reference implementation."""
    import keras
    from keras import layers, ops

    c = BASE
    h = c["hidden_size"]
    init = keras.initializers.TruncatedNormal(stddev=0.02)
    token_ids = keras.Input((SEQ,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((SEQ,), dtype="int32", name="segment_ids")
    padding_mask = keras.Input((SEQ,), dtype="int32", name="padding_mask")
    positions = keras.Input((PREDICTIONS,), dtype="int32", name="masked_lm_positions")
    word = layers.Embedding(c["vocab_size"], h, embeddings_initializer=init)
    x = word(token_ids) + layers.Embedding(2, h, embeddings_initializer=init)(segment_ids)
    x = x + layers.Embedding(SEQ, h, embeddings_initializer=init)(ops.arange(SEQ))[None]
    x = layers.Dropout(0.1)(layers.LayerNormalization(epsilon=1e-12)(x))
    mask = ops.cast(padding_mask[:, None, :], "bool")
    for _ in range(c["num_hidden_layers"]):
        attention = layers.MultiHeadAttention(c["num_attention_heads"], h // c["num_attention_heads"],
                                              dropout=0.1, kernel_initializer=init)
        x = layers.LayerNormalization(epsilon=1e-12)(
            x + layers.Dropout(0.1)(attention(x, x, attention_mask=mask)))
        inner = layers.Dense(c["intermediate_size"], activation="gelu", kernel_initializer=init)(x)
        x = layers.LayerNormalization(epsilon=1e-12)(
            x + layers.Dropout(0.1)(layers.Dense(h, kernel_initializer=init)(inner)))
    pooled = layers.Dense(h, activation="tanh", kernel_initializer=init)(x[:, 0])
    picked = ops.take_along_axis(x, positions[:, :, None], axis=1)
    picked = layers.LayerNormalization(epsilon=1e-12)(
        layers.Dense(h, activation="gelu", kernel_initializer=init)(picked))
    mlm = layers.Dense(c["vocab_size"], name="mlm", dtype="float32")(picked)
    nsp = layers.Dense(2, name="nsp", dtype="float32")(pooled)
    inputs = {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask,
              "masked_lm_positions": positions}
    return keras.Model(inputs, {"mlm": mlm, "nsp": nsp})


def _result(name, device, batch, steps, elapsed, first, loss, notes) -> dict:
    return {"implementation": name, "device": device.name, "device_type": device.type,
            "replicas": device.count, "precision": device.precision, "xla": device.xla,
            "global_batch": batch,
            "timed_steps": steps, "seconds": round(elapsed, 3),
            "sequences_per_sec": round(steps * batch / elapsed, 3),
            "first_call_seconds": round(first, 2), "loss": round(loss, 3), "notes": notes}


def _bench_peak() -> dict:
    import tensorflow as tf

    _, device = _device()
    dtype = tf.bfloat16 if device.precision == "bfloat16" else tf.float32
    n = 2048 if device.type == "cpu" else 8192
    reps = 5 if device.type == "cpu" else 50
    a = tf.random.normal((n, n), dtype=tf.float32)
    a = tf.cast(a, dtype)

    @tf.function
    def chain(x):
        for _ in range(reps):
            x = tf.matmul(x, a) * tf.cast(1e-3, dtype)
        return tf.reduce_sum(tf.cast(x, tf.float32))

    chain(a).numpy()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        chain(a).numpy()
        best = min(best, time.perf_counter() - start)
    measured = 2.0 * n ** 3 * reps / best * device.count
    if device.type == "gpu":
        peak, source = _gpu_peak(device.name, device.count)
        peak = peak or measured
    else:
        peak, source = _cpu_peak()
        if measured > peak:  # the clock boosts above /proc/cpuinfo's figure: the matmul is
            source += f"; measured matmul {measured / 1e9:.0f} GFLOP/s is higher and used"
            peak = measured
    return {"device": device.name, "device_type": device.type, "peak_flops": peak,
            "peak_source": source, "measured_matmul_flops": measured,
            "measured_matmul": f"{n}x{n} {dtype.name} matmul x{reps}, best of 3"}


def _gpu_peak(name: str, count: int) -> tuple[float | None, str]:
    for key, value in GPU_PEAK_BF16.items():
        if key in name:
            return value * count, f"data sheet: {key} dense bf16 {value / 1e12:.0f} TFLOP/s x {count}"
    return None, f"{name} not in GPU_PEAK_BF16: measured matmul used as peak"


def _cpu_peak() -> tuple[float, str]:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags, mhz, model = set(), 0.0, "CPU"
    for line in info.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = set(value.split())
        elif key == "cpu MHz" and not mhz:
            mhz = float(value)
        elif key == "model name" and model == "CPU":
            model = value.strip()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if "avx512f" in flags:
        per_cycle, isa = 64, "AVX-512"
    elif "avx2" in flags and "fma" in flags:
        per_cycle, isa = 32, "AVX2+FMA"
    else:
        per_cycle, isa = 8, "SSE"
    ghz = (mhz or 2000.0) / 1000.0
    peak = cores * ghz * 1e9 * per_cycle
    return peak, (f"{model}: {cores} cores x {ghz:.2f} GHz x {per_cycle} fp32 FLOP/cycle "
                  f"({isa}, 2 FMA ports) = {peak / 1e9:.0f} GFLOP/s")


def _main(mode: str) -> int:
    sys.path.insert(0, str(REPO))
    fn = {"runner": _bench_runner, "keras_fit": _bench_keras_fit, "peak": _bench_peak}[mode]
    print(json.dumps(fn()))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
