"""``tpuctl estimate`` and the caps' bad input, through the installed entry point on the local provider.

The seed's pretraining case comes out with every number's basis and the cheapest and fastest
marked; what cannot be estimated or capped (a job whose FLOPs cannot be known, an unknown type, a
budget of 0, a deadline in the past) is one line, exit 2, and nothing is created.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.basics.config import home
from tests.conftest import REPO, run_tpuctl_process

BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "hidden_act": "gelu", "max_position_embeddings": 512, "type_vocab_size": 2}
SEED = ["--job", "templates/bert-pretrain.yaml", "--set", "bert_dir=gs://my-bucket/bert/base",
        "--set", "input_files=gs://my-bucket/data/*.tfrecord", "--set", "train_batch_size=256",
        "--set", "num_train_steps=500000"]


@pytest.fixture
def base_in_bucket(tmp_path):
    """BERT-Base's config staged in a bucket, as a user who staged the released model has it."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "bert_config.json").write_text(json.dumps(BASE))
    r = run_tpuctl_process("stage", str(tmp_path / "base"), "gs://my-bucket/bert/base", "--create-bucket")
    assert r.code == 0, r.err


def _one_error(r, fragment: str) -> str:
    assert r.code == 2, (r.code, r.out, r.err)
    lines = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert len(lines) == 1 and fragment in lines[0] and "; " in lines[0], r.err
    assert "Traceback" not in r.err
    return lines[0]


def test_the_seeds_pretraining_case_before_renting_anything(base_in_bucket):
    before = set(home().rglob("*"))
    r = run_tpuctl_process("estimate", *SEED, "--accelerator-type", "v2-8,v6e-8", "--preemptible", "--on-demand")
    assert r.code == 0, r.err
    rows = {tuple(line.split()[:3]): line for line in r.out.splitlines() if line.startswith(("v2-8 ", "v6e-8 "))}
    v2 = rows[("v2-8", "us-central1-b", "preemptible")]
    assert " 1.35 " in v2 and " published " in v2 and " 2d" in v2             # about 2.3 days, $74
    assert "cheapest" in rows[("v6e-8", "us-east5-b", "preemptible")]
    assert "fastest" in rows[("v6e-8", "us-east5-b", "on-demand")]
    assert "(6 x 109,482,240 parameters x 128 tokens" in r.out and "Antyukhov 2019" in r.out
    assert "assumed: v3's figure carried over" in r.out          # v6e's utilisation is flagged
    assert "cheapest: tpuctl up NAME --accelerator-type v6e-8 --zone us-east5-b --preemptible" in r.out
    assert set(home().rglob("*")) == before, "an estimate creates nothing"
    doc = run_tpuctl_process("estimate", *SEED, "--accelerator-type", "v2-8", "--preemptible", "--json").json()
    (e,) = doc["estimates"]
    assert 2.2 < e["total_s"] / 86400 < 2.4 and 70 < e["total_usd"] < 78 and e["interruptions"] > 2
    assert doc["workload"]["flops_per_step"] == pytest.approx(256 * 85.894e9, rel=1e-4)


def test_what_cannot_be_estimated_is_one_line_and_exit_2(tmp_path):
    r = run_tpuctl_process("estimate", "--job", "examples/mlp/spec.yaml", "--accelerator-type", "v2-8")
    _one_error(r, "cannot estimate job: keras")
    assert "--flops-per-step" in r.err
    ok = run_tpuctl_process("estimate", "--job", "examples/mlp/spec.yaml", "--accelerator-type", "v2-8",
                            "--flops-per-step", "1e12", "--on-demand", "--json")
    assert ok.code == 0 and ok.json()["estimates"][0]["speed_source"] == "published", ok.err
    _one_error(run_tpuctl_process("estimate", *SEED, "--accelerator-type", "v2-8"), "cannot count the FLOPs")
    _one_error(run_tpuctl_process("estimate", "--job", "examples/mlp/spec.yaml", "--accelerator-type", "v9-8"),
               "unknown accelerator type 'v9-8'")
    _one_error(run_tpuctl_process("estimate", "--job", "examples/mlp/spec.yaml", "--accelerator-type", "v2-8",
                                  "--flops-per-step", "0"), "--flops-per-step 0 is not a positive number")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--budget-usd", "0"], "--budget-usd 0 leaves nothing to spend"),
    (["--set", "budget_usd=-5"], "budget_usd is -5; give a positive amount"),
    (["--deadline", "2020-01-01T00:00"], "--deadline 2020-01-01T00:00 is in the past"),
    (["--deadline", "friday"], "deadline 'friday' is not a date and time"),
])
def test_bad_caps_are_refused_before_a_run_is_created(args, fragment):
    assert run_tpuctl_process("up", "lab").code == 0
    before = {p for p in home().rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    r = run_tpuctl_process("train", "lab", "--job", "examples/mlp/spec.yaml", "--code", "examples/mlp", *args)
    _one_error(r, fragment)
    after = {p for p in home().rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    assert after == before, "nothing staged, no run recorded"
    assert not (Path(home()) / "runs").exists()
    assert (REPO / "examples/mlp/spec.yaml").is_file()
