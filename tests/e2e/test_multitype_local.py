"""Several accelerator types on the local provider: the rehearsal picks one as `up` on Google Cloud
would, and `train` checks the spec's batches against every type the cluster may be recreated as
(a preempted TPU whose type is stocked out comes back as another candidate), before a run exists."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_tpuctl_process

pytestmark = [pytest.mark.tf]


def test_train_checks_the_batches_against_every_candidate_type(tiny_bert, tmp_path):
    r = run_tpuctl_process("up", "mtl", "-a", "v2-8,v2-32", "--in-order", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["accelerator_type"] == "v2-8"
    sets = ["--set", f"bert_dir={tiny_bert}", "--set", f"train_file={tiny_bert / 'train.tsv'}",
            "--set", f"model_dir={tmp_path / 'model'}"]
    r = run_tpuctl_process("train", "mtl", "--job", "templates/bert-finetune-tiny.yaml", *sets,
                           "--set", "train_batch_size=16", "--dry-run")
    assert r.code == 2
    [line] = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert "train_batch_size 16 does not divide over the 32 cores of a v2-32 (4 hosts)" in line
    assert "cluster mtl may be recreated as a v2-32: its --accelerator-type lists v2-8,v2-32" in line
    assert "--set train_batch_size=32" in r.err
    r = run_tpuctl_process("train", "mtl", "--job", "templates/bert-finetune-tiny.yaml", *sets,
                           "--set", "train_batch_size=32", "--set", "eval_batch_size=32", "--dry-run")
    assert r.code == 0, r.err
    assert run_tpuctl_process("down", "mtl").code == 0
