"""Pretraining data options out of range: one line that names the option broken and a value that
works, in the spelling of the command line the user typed (``tpuctl data``'s ``--max-seq-length``,
the job module's ``--max_seq_length``), before anything is staged or written. No TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobs.pretraining.data_options import DataOptions
from tests.conftest import REPO, run_tpuctl_process

LINE = ("tpuctl: error: --max-predictions-per-seq 20 is more than --max-seq-length 8 allows; use "
        "--max-predictions-per-seq 1 (at most 1 of 8 tokens is masked at --masked-lm-prob 0.15) or a longer "
        "--max-seq-length")


@pytest.fixture
def inputs(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat.\nit was happy.\n\nthe dog ran.\n")
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n")
    return corpus, bert


@pytest.mark.parametrize("extra", [(), ("--on", "lab")], ids=["here", "on a host"])
def test_tpuctl_data_names_the_one_option_broken_and_the_value_to_use(tmp_path, inputs, extra):
    corpus, bert = inputs
    out = tmp_path / "shards"
    r = run_tpuctl_process("data", str(corpus), "--bert-dir", str(bert), "--out", str(out), "--max-seq-length", "8",
                           *extra, "--provider", "local")
    assert (r.code, r.err.strip().splitlines(), r.out) == (2, [LINE], "")
    assert not out.exists()
    fixed = run_tpuctl_process("data", str(corpus), "--bert-dir", str(bert), "--out", str(out), "--max-seq-length",
                               "8", "--max-predictions-per-seq", "1", "--dry-run")
    assert fixed.code == 0, fixed.err


def test_the_job_module_says_the_same_in_its_own_flags(tmp_path, inputs):
    corpus, bert = inputs
    proc = subprocess.run([sys.executable, "-m", "jobs.pretraining", "--input_file", str(corpus),
                           "--output_dir", str(tmp_path / "out"), "--vocab_file", str(bert / "vocab.txt"),
                           "--max_seq_length", "8"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        ("tpuctl: error: --max_predictions_per_seq 20 is more than --max_seq_length 8 allows; use --max_predictions_per_seq 1 "
        "(at most 1 of 8 tokens is masked at --masked_lm_prob 0.15) or a longer --max_seq_length")]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("length", [5, 8, 32, 128, 512])
@pytest.mark.parametrize("prob", [0.01, 0.15, 0.5, 0.99])
def test_the_value_named_is_accepted_and_is_all_a_sequence_can_use(length, prob):
    problem = DataOptions(max_seq_length=length, max_predictions_per_seq=length + 1, masked_lm_prob=prob).problem()
    assert problem is not None
    named = int(problem[1].split()[2])
    assert DataOptions(max_seq_length=length, max_predictions_per_seq=named, masked_lm_prob=prob).problem() is None
    assert named == max(1, round(length * prob))          # mask_tokens never masks more than this
