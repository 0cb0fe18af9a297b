"""Pretraining data: Beam's in-process runner (``--runner beam``) beside the multiprocessing path.

The rule for the local default: Beam's runner only if it keeps up with the worker processes.
Both run the same parts (8) of the same corpus (the tiny model's generated text at
``BENCH_DATA_KB`` x 4, as in bench_pretraining_data) with every core, 1 and all workers, in the
interpreter that has apache-beam (``BENCH_BEAM_PYTHON``, default ``.venv-beam/bin/python`` as
``make test-beam`` builds it): the same tokenizer and code for both. The shards must be equal.
Without that interpreter the report says so.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

from .bench_pretraining_data import DUPE, KB, REPO, _iter_records, _measure


def run() -> dict:
    import shutil

    python = os.environ.get("BENCH_BEAM_PYTHON") or str(REPO / ".venv-beam" / "bin" / "python")
    if not Path(python).exists():
        return {"not_run": f"{python} does not exist: run `make test-beam` (builds .venv-beam) or set BENCH_BEAM_PYTHON"}
    tmp = Path(tempfile.mkdtemp(prefix="bench-beam-"))
    try:
        return _run(tmp, python)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(tmp: Path, python: str) -> dict:
    from jobs.bert import tiny

    cpus = os.cpu_count() or 1
    (tmp / "bert").mkdir()
    vocab = tmp / "bert" / "vocab.txt"
    vocab.write_text("\n".join(tiny.vocabulary()) + "\n", encoding="utf-8")
    base = tiny.corpus(random.Random(1), documents=max(10, KB * 1024 // 210))
    corpus = tmp / "corpus-4x.txt"
    corpus.write_text("\n\n".join([base.rstrip("\n")] * 4) + "\n", encoding="utf-8")
    common = [python, "-m", "jobs.pretraining", "--input_file", str(corpus), "--vocab_file", str(vocab),
              "--dupe_factor", DUPE, "--max_seq_length", "128", "--max_predictions_per_seq", "20", "--parts", "8"]
    report: dict = {"corpus_mb": round(corpus.stat().st_size / 1e6, 2), "parts": 8, "cpus": cpus, "runs": {}}
    shards = {}
    for runner in ("local", "beam"):
        for workers in sorted({1, cpus}):
            name, out = f"{runner}_{workers}_workers", tmp / f"{runner}-{workers}"
            m = _measure([*common, "--output_dir", str(out), "--workers", str(workers), "--runner", runner])
            files = sorted(str(p) for p in out.glob("*.tfrecord"))
            n = sum(1 for _ in _iter_records(files))
            m.update(instances=n, instances_per_s=round(n / m["seconds"], 1))
            report["runs"][name] = m
            shards[name] = [Path(f).read_bytes() for f in files]
    runs = report["runs"]
    report["beam_shards_equal_local"] = shards[f"beam_{cpus}_workers"] == shards[f"local_{cpus}_workers"]
    report["beam_vs_local_seconds_all_workers"] = round(
        runs[f"beam_{cpus}_workers"]["seconds"] / runs[f"local_{cpus}_workers"]["seconds"], 2)
    report["load_average_at_end"] = os.getloadavg()
    return report
