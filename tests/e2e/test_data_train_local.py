"""`tpuctl data` then `tpuctl train` on its shards, on the local provider: the data is made
before the TPU exists to bill, and the job reads the shards the command printed."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_tpuctl_process

pytestmark = [pytest.mark.tf, pytest.mark.xdist_group("tf")]


def test_train_reads_the_shards_tpuctl_data_made(tiny_bert):
    made = run_tpuctl_process("data", str(tiny_bert / "corpus.txt"), "--bert-dir", str(tiny_bert),
                              "--out", "gs://data-bkt/tiny", "--create-bucket", "--max-seq-length", "64",
                              "--max-predictions-per-seq", "10", "--dupe-factor", "3", "--parts", "2",
                              "--json", timeout=300)
    assert made.code == 0, made.err
    doc = json.loads(made.out)
    assert run_tpuctl_process("up", "lab").code == 0
    train = run_tpuctl_process("train", "lab", "--job", "templates/bert-pretrain-tiny.yaml",
                               "--set", f"bert_dir={tiny_bert}", "--set", f"input_files={doc['input_files']}",
                               "--set", "num_train_steps=20", "--set", "save_checkpoints_steps=10",
                               "--set", "steps_per_execution=10", "--poll", "1", "--json", timeout=420)
    assert train.code == 0, train.err[-3000:]
    run = json.loads(train.out)["run"]
    assert run["status"] == "finished" and run["last_progress"]["step"] == 20
    logs = run_tpuctl_process("logs", run["run_id"])
    assert f"{doc['instances']} pretraining examples in 2 file(s)" in logs.out + logs.err
    assert "creating pretraining data" not in logs.out + logs.err
    assert run_tpuctl_process("down", "lab").code == 0
