"""The Apache Beam pipeline of pretraining data (``--runner beam``), run by Beam's in-process
FnApiRunner with one SDK worker process per core: the same shards as the multiprocessing path,
byte for byte, for the same parts and seed; a re-run is a no-op; an interrupted run resumes.

Needs the beam extra, which cannot be installed beside TensorFlow: ``make test-beam`` runs these
in .venv-beam; ``make test`` deselects them (``-m "not beam"``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.bert.tiny import corpus, vocabulary

pytestmark = pytest.mark.beam
REPO = Path(__file__).resolve().parents[2]
COMMON = ["--max_seq_length", "64", "--max_predictions_per_seq", "10", "--dupe_factor", "2",
          "--parts", "3", "--random_seed", "7"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    """A vocab (the tiny model's; no TensorFlow here) and 200 documents in two files, one CRLF."""
    root = tmp_path_factory.mktemp("beam-data")
    (root / "bert").mkdir()
    (root / "bert" / "vocab.txt").write_text("\n".join(vocabulary()) + "\n", encoding="utf-8")
    text = corpus(random.Random(5), documents=200)
    half = text.index("\n\n", len(text) // 2) + 2
    (root / "a.txt").write_text(text[:half], encoding="utf-8")
    (root / "b.txt").write_bytes(text[half:].replace("\n", "\r\n").encode())
    return root / "bert" / "vocab.txt", root


def create(vocab: Path, corpus_dir: Path, out: Path, *extra: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "jobs.pretraining", "--input_file",
                           f"{corpus_dir}/*.txt", "--vocab_file", str(vocab), "--output_dir", str(out),
                           *COMMON, *extra], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"result": json.loads(proc.stdout.strip().splitlines()[-1]), "log": proc.stderr}


def shards(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecord"))}


def test_beam_shards_equal_the_multiprocessing_path_and_an_interrupted_run_resumes(tmp_path, inputs):
    vocab, corpus_dir = inputs
    local = create(vocab, corpus_dir, tmp_path / "local", "--workers", "2")
    beam = create(vocab, corpus_dir, tmp_path / "beam", "--runner", "beam", "--workers", "2")
    assert "with Beam (beam)" in beam["log"]
    assert len(shards(tmp_path / "beam")) == 3
    assert shards(tmp_path / "beam") == shards(tmp_path / "local")
    mine = json.loads((tmp_path / "beam" / "manifest.json").read_text())
    theirs = json.loads((tmp_path / "local" / "manifest.json").read_text())
    assert mine["complete"] and mine["counts"] == theirs["counts"]
    assert beam["result"]["instances"] == local["result"]["instances"] > 0

    again = create(vocab, corpus_dir, tmp_path / "beam", "--runner", "beam", "--workers", "2")
    assert again["result"]["made_parts"] == 0 and "nothing to do" in again["log"]

    # interrupted: part 1 never finished (a .partial left), the manifest has no counts yet
    made = shards(tmp_path / "beam")
    name = "part-00001-of-00003.tfrecord"
    (tmp_path / "beam" / name).rename(tmp_path / "beam" / f"{name}.partial")
    (tmp_path / "beam" / "manifest.json").write_text(json.dumps({**mine, "counts": {}, "complete": False}))
    resumed = create(vocab, corpus_dir, tmp_path / "beam", "--runner", "beam", "--workers", "2")
    assert "resuming: 0 of 3 parts are done" in resumed["log"]
    assert shards(tmp_path / "beam") == made
    assert json.loads((tmp_path / "beam" / "manifest.json").read_text())["counts"] == theirs["counts"]


def test_tpuctl_data_runner_beam_stages_the_same_shards(tmp_path, inputs, tpuctl_process):
    """`tpuctl data --runner beam` to a bucket of the local provider: the shards the local runner makes."""
    vocab, corpus_dir = inputs
    files = [str(corpus_dir / "a.txt"), str(corpus_dir / "b.txt")]
    opts = ["--bert-dir", str(vocab.parent), "--max-seq-length", "64", "--max-predictions-per-seq", "10",
            "--dupe-factor", "2", "--parts", "3", "--seed", "7", "--workers", "2", "--provider", "local",
            "--create-bucket", "--json"]
    beam = tpuctl_process("data", *files, "--out", "gs://beam-data/wiki", "--runner", "beam", *opts, timeout=300)
    assert beam.code == 0, beam.err
    local = tpuctl_process("data", *files, "--out", str(tmp_path / "here"), *opts, timeout=300)
    assert local.code == 0, local.err
    assert beam.json()["instances"] == local.json()["instances"]
    bucket = Path(os.environ["TPUCTL_HOME"]) / "local" / "buckets" / "beam-data" / "wiki"
    assert shards(bucket) == shards(tmp_path / "here")
