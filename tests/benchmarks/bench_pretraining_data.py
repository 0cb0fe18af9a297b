"""Pretraining data creation beside google-research's create_pretraining_data.py.

The original runs from its own source, not from a copy in this project: set
``BERT_REFERENCE_SRC`` to a directory holding google-research/bert's ``create_pretraining_data.py``
and ``tokenization.py`` (``git clone https://github.com/google-research/bert``); it is run
under TensorFlow 2 with ``tf.compat.v1`` standing in for the TF 1 module it imports. Without the
variable the original's rows say so and the rest is measured.

Corpus: the tiny model's generated text (``jobs.bert.tiny.corpus``) at ``BENCH_DATA_KB``
(default 1024) x 1, 4 and 16, tokenized with the tiny vocab (a real 30k vocab splits more words
into pieces; the ratios, not the absolute rates, are the result). ``dupe_factor`` 2 keeps the
original's run short. Each run is a process; its time includes the interpreter (and, for the
original and ``--exact``, TensorFlow's import); peak memory is the largest ``ru_maxrss`` of
the process tree (``os.wait4`` in a small launcher), i.e. of the biggest single process: with N workers the total is
about N times a worker's. The machine is shared with other jobs: wall times are noisy (the load average is reported),
CPU seconds and memory much less.

The parallel path runs with ``tokenizers`` for ASCII lines (the ``data`` extra) and once with
``--tokenizer python`` (the reference only) to show what it saves.

Reported: instances per second per core, peak memory, memory as the corpus grows (flat is the
goal), 1 vs all workers, and the original's output against ``--exact`` (every feature of every
example) and against the parallel path's statistics.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KB = int(os.environ.get("BENCH_DATA_KB", "1024"))
DUPE = "2"

_ORIGINAL = """
import runpy, sys
import tensorflow as tf
src = sys.argv[1]
sys.modules["tensorflow"] = tf.compat.v1
sys.path.insert(0, src)
sys.argv = [src + "/create_pretraining_data.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# A small launcher reports its child's rusage: a child forked from this process (TensorFlow
# loaded) would inherit its RSS high-water mark across exec.
_LAUNCH = """
import json, os, subprocess, sys, time
start = time.perf_counter()
with open(sys.argv[1], "wb") as log:
    pid = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=log).pid
    _, status, u = os.wait4(pid, 0)
print(json.dumps({"status": status, "seconds": time.perf_counter() - start, "maxrss_kb": u.ru_maxrss,
                  "cpu_s": u.ru_utime + u.ru_stime}))
"""


def _measure(argv: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    with tempfile.NamedTemporaryFile() as log:
        proc = subprocess.run([sys.executable, "-c", _LAUNCH, log.name, *argv], cwd=REPO, env=env,
                              capture_output=True, text=True, check=True)
        m = json.loads(proc.stdout)
        if m["status"] != 0:
            raise RuntimeError(f"{argv[:4]} failed: {Path(log.name).read_text(errors='replace')[-800:]}")
    return {"seconds": round(m["seconds"], 2), "cpu_s": round(m["cpu_s"], 2),
            "peak_mb": round(m["maxrss_kb"] / 1024, 1)}


def _records(files: list[str]) -> list[dict]:
    import tensorflow as tf

    return [{k: tuple(v.int64_list.value) or tuple(v.float_list.value)
             for k, v in tf.train.Example.FromString(r.numpy()).features.feature.items()}
            for r in tf.data.TFRecordDataset(files)]


def _stats(rows: list[dict]) -> dict:
    lengths = [sum(r["input_mask"]) for r in rows]
    hist = [0] * 5
    for n in lengths:
        hist[min(n // 32, 4)] += 1
    return {"instances": len(rows),
            "masked_fraction": round(sum(sum(r["masked_lm_weights"]) for r in rows) / sum(lengths), 4),
            "random_next_fraction": round(sum(r["next_sentence_labels"][0] for r in rows) / len(rows), 4),
            "length_histogram_by_32": [round(h / len(rows), 4) for h in hist]}


def run() -> dict:
    import shutil

    tmp = Path(tempfile.mkdtemp(prefix="bench-data-"))
    try:
        return _run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(tmp: Path) -> dict:
    from jobs.bert import tiny

    cpus = os.cpu_count() or 1
    tiny.write(str(tmp / "bert"))
    vocab = str(tmp / "bert" / "vocab.txt")
    base = tiny.corpus(random.Random(1), documents=max(10, KB * 1024 // 210))
    corpora = {}
    for scale in (1, 4, 16):
        path = tmp / f"corpus-{scale}x.txt"
        path.write_text("\n\n".join([base.rstrip("\n")] * scale) + "\n", encoding="utf-8")
        corpora[scale] = str(path)
    common = ["--vocab_file", vocab, "--dupe_factor", DUPE, "--max_seq_length", "128",
              "--max_predictions_per_seq", "20"]
    ours = [sys.executable, "-m", "jobs.pretraining"]
    report: dict = {"corpus_mb_1x": round(os.path.getsize(corpora[1]) / 1e6, 2), "dupe_factor": int(DUPE),
                    "cpus": cpus, "runs": {}}

    def row(name: str, argv: list[str], out: str, scale: int, workers: int = 1) -> list[str]:
        m = _measure(argv)
        files = sorted(str(p) for p in Path(out).glob("*.tfrecord")) if Path(out).is_dir() else [out]
        n = sum(1 for _ in _iter_records(files))
        m.update(instances=n, corpus_scale=scale, workers=workers,
                 instances_per_s_per_core=round(n / m["seconds"] / workers, 1),
                 instances_per_cpu_s=round(n / m["cpu_s"], 1))
        report["runs"][name] = m
        return files

    src = os.environ.get("BERT_REFERENCE_SRC")
    original_files = None
    if src:
        out = str(tmp / "original.tfrecord")
        original_files = row("original_1x", [sys.executable, "-c", _ORIGINAL, src, f"--input_file={corpora[1]}",
                                            f"--output_file={out}", f"--vocab_file={vocab}", "--do_lower_case=True",
                                            "--max_seq_length=128", "--max_predictions_per_seq=20",
                                            "--masked_lm_prob=0.15", "--random_seed=12345", f"--dupe_factor={DUPE}",
                                            "--short_seq_prob=0.1"], out, 1)
    else:
        report["runs"]["original_1x"] = "not run: set BERT_REFERENCE_SRC to google-research/bert's source"
    exact_files = row("exact_1x", [*ours, "--input_file", corpora[1], "--output_dir", str(tmp / "exact"),
                                   *common, "--exact"], str(tmp / "exact"), 1)
    par_files = {}
    # memory: one part, pools of 1/4 of the 1x corpus, so every scale fills several pools
    pool = str(max(4096, os.path.getsize(corpora[1]) // 4))
    for scale in (1, 4, 16):
        out = str(tmp / f"pool-{scale}x")
        row(f"parallel_{scale}x_1_part_small_pools", [*ours, "--input_file", corpora[scale], "--output_dir", out,
                                                      *common, "--workers", "1", "--parts", "1", "--pool_bytes", pool],
            out, scale)
    for scale in (1, 4, 16):
        out = str(tmp / f"par-{scale}x")
        par_files[scale] = row(f"parallel_{scale}x_1_worker", [*ours, "--input_file", corpora[scale], "--output_dir",
                                                              out, *common, "--workers", "1", "--parts", "8"], out, scale)
    out = str(tmp / "par-4x-python")
    row("parallel_4x_1_worker_python_tokenizer", [*ours, "--input_file", corpora[4], "--output_dir", out, *common,
                                                  "--workers", "1", "--parts", "8", "--tokenizer", "python"], out, 4)
    out = str(tmp / "par-4x-all")
    all_files = row(f"parallel_4x_{cpus}_workers", [*ours, "--input_file", corpora[4], "--output_dir", out, *common,
                                                    "--workers", str(cpus), "--parts", "8"], out, 4, cpus)
    report["parallel_output_same_for_1_and_all_workers"] = all(
        Path(a).read_bytes() == Path(b).read_bytes() for a, b in zip(par_files[4], all_files))
    exact_rows = _records(exact_files)
    report["statistics"] = {"exact": _stats(exact_rows), "parallel": _stats(_records(par_files[1]))}
    if original_files:
        original_rows = _records(original_files)
        report["statistics"]["original"] = _stats(original_rows)
        same = sum(a == b for a, b in zip(original_rows, exact_rows))
        report["exact_equals_original"] = f"{same} of {len(original_rows)} examples equal (every feature)" + (
            "" if len(exact_rows) == len(original_rows) else f"; counts differ: {len(exact_rows)}")
    runs = report["runs"]
    report["peak_mb_by_scale_parallel"] = {s: runs[f"parallel_{s}x_1_worker"]["peak_mb"] for s in (1, 4, 16)}
    report["peak_mb_by_scale_pool_of_quarter_1x"] = {
        s: runs[f"parallel_{s}x_1_part_small_pools"]["peak_mb"] for s in (1, 4, 16)}
    report["speedup_all_workers_vs_1_at_4x"] = round(
        runs["parallel_4x_1_worker"]["seconds"] / runs[f"parallel_4x_{cpus}_workers"]["seconds"], 2)
    report["cpu_s_python_tokenizer_vs_tokenizers_at_4x"] = round(
        runs["parallel_4x_1_worker_python_tokenizer"]["cpu_s"] / runs["parallel_4x_1_worker"]["cpu_s"], 2)
    report["cpu_s_all_workers_vs_1_at_4x"] = round(
        runs[f"parallel_4x_{cpus}_workers"]["cpu_s"] / runs["parallel_4x_1_worker"]["cpu_s"], 2)
    report["load_average_at_end"] = os.getloadavg()
    return report


def _iter_records(files: list[str]):
    """Count TFRecords without TensorFlow: walk the length prefixes."""
    import struct

    for name in files:
        with open(name, "rb") as f:
            while header := f.read(12):
                (length,) = struct.unpack("<Q", header[:8])
                f.seek(length + 4, 1)
                yield 1
