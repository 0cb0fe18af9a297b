"""A spec whose data is far smaller than the steps x batch it must feed: one warning line in the
job's log, for every job the runner drives (the rule is :mod:`jobs.runner.epochs`; the count is the
job's epoch stream)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.runner.epochs import MAX_EPOCHS, overuse_warning
from tests.bert_dirs import config_only_bert

from .conftest import REPO, TEMPLATES, job_env


@pytest.mark.parametrize("examples, steps, batch, warned", [
    (3, 300, 16, True),                 # a one-line corpus under the tiny pretraining spec: 1600 epochs
    (480, 300, 16, False),              # the tiny fine-tune: 10 epochs
    (100, MAX_EPOCHS, 100, False),      # exactly MAX_EPOCHS
    (100, MAX_EPOCHS + 1, 100, True),
    (0, 300, 16, False),                # unknown count
])
def test_the_warning_is_for_more_than_max_epochs(examples, steps, batch, warned):
    assert (overuse_warning(examples, steps, batch) is not None) == warned


def test_the_warning_names_the_steps_that_stay_within_max_epochs():
    line = overuse_warning(3, 300, 16)
    assert line == ("warning: 300 steps of train_batch_size 16 read each of the 3 training examples 1600 times "
                    "(more than 100 epochs): the model can only memorise them, and its metrics say nothing "
                    "about new data; add data, or lower num_train_steps to 18 or less (--set num_train_steps=18)")
    assert overuse_warning(3, 18, 16) is None


@pytest.mark.tf
def test_a_one_line_corpus_is_warned_about_in_the_job_log(tmp_path):
    """The tiny pretraining spec on a one-line corpus (3 examples). The job is stopped once it has
    said so (SIGTERM before training: exit 42), to stay fast. The line is the job's log, which
    `tpuctl logs` prints (tests/e2e/test_data_train_local.py reads a sibling line there)."""
    bert = config_only_bert(tmp_path, ["the", "cat", "sat", "on", "mat", "."])
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat .\n")
    argv = [sys.executable, "-m", "jobs", "run", str(TEMPLATES / "bert-pretrain-tiny.yaml"),
            "--set", f"bert_dir={bert}", "--set", f"corpus_files={corpus}", "--set", f"model_dir={tmp_path / 'run'}"]
    proc = subprocess.Popen(argv, cwd=REPO, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + 180
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if "warning: 300 steps" in line or time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.communicate(timeout=120)[0]
    output = "".join(lines) + rest
    assert "jobs: 3 pretraining examples in 2 file(s)" in output, output[-3000:]
    warnings = [ln for ln in output.splitlines() if "more than 100 epochs" in ln]
    assert warnings == [f"jobs: {overuse_warning(3, 300, 16)}"], output[-3000:]
    assert proc.returncode == 42, output[-3000:]
    assert not Path(tmp_path / "run" / "checkpoint").exists()
