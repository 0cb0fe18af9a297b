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
                            "--flops-per-step", "1e14", "--on-demand", "--json")
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


def _practice_runs(count: int) -> None:
    """Run records as the README tour leaves them: preemptible v2-8 runs on the local provider,
    each preempted once (tpuctl simulate preempt) after seconds of holding its TPU."""
    from provision.cloud.storage import local_bucket
    from provision.runs import store as runs

    bucket = local_bucket("tpuctl-local")
    if not bucket.exists():
        bucket.create("local")
    for i in range(count):
        rec = runs.RunRecord(run_id=f"lab-20261127-12000{i}-ab1{i}", cluster="lab", provider="local",
                             project="local", zone="us-central1-b", bucket="gs://tpuctl-local",
                             model_dir=f"gs://tpuctl-local/m{i}", num_train_steps=300, save_checkpoints_steps=50,
                             job="bert-finetune", status="finished", preemptions=1, seconds_lost=15.0,
                             seconds_by_state={"training": 6.0, "starting": 2.0},
                             pricing={"accelerator_type": "v2-8", "zone": "us-central1-b", "tier": "preemptible",
                                      "usd_per_hour": 1.35})
        runs.RunStore(bucket, rec.run_id).save(rec)
        runs.remember(rec)


def test_practice_preemptions_in_minutes_make_no_rate(base_in_bucket):
    """Practice preemptions in minutes of holding make no rate: after the tour, "interruptions:
    112.5/h (ledger: 5 preemption(s) in 0.0 held hours of 5 run(s) here) ... it never finishes"
    and TIME "never"; the published limit is used instead."""
    _practice_runs(5)
    r = run_tpuctl_process("estimate", *SEED, "--accelerator-type", "v2-8", "--preemptible")
    assert r.code == 0, r.err
    row = next(ln for ln in r.out.splitlines() if ln.startswith("v2-8 "))
    assert " never " not in row and " 2d" in row, r.out
    (line,) = [ln for ln in r.out.splitlines() if ln.strip().startswith("interruptions:")]
    assert line.strip().startswith("interruptions: 0.04167/h (published: preemptible TPUs stop after 24 h at the "
                                   "latest (a floor: no rate is published for earlier ones); the ledger's 5 "
                                   "preemption(s) here came in 1 min held, under the 1 h a rate needs) x "), r.out


def test_the_recovery_time_is_the_median_measured_by_past_runs_once_there_is_one(base_in_bucket):
    """Without past preemptions the recovery time is the assumed default, and says so; once runs on
    the provider and type have recovered, it is the median of their recoveries (each run's goodput
    summary keeps one per preemption), and says over how many."""
    from provision.cloud.storage import local_bucket
    from provision.runs import store as runs

    def recovery_line() -> str:
        r = run_tpuctl_process("estimate", *SEED, "--accelerator-type", "v2-8", "--preemptible", "--on-demand")
        assert r.code == 0, r.err
        (line,) = [ln.strip() for ln in r.out.splitlines() if ln.strip().startswith("recovery ")]
        return line

    assert recovery_line().startswith("recovery 10m, assumed: 10 min")
    bucket = local_bucket("tpuctl-local")
    if not bucket.exists():
        bucket.create("local")
    for i, recoveries in enumerate(([100.0, 400.0], [192.0])):
        rec = runs.RunRecord(run_id=f"lab-20261205-10000{i}-cd2{i}", cluster="lab", provider="local",
                             project="local", zone="us-central1-b", bucket="gs://tpuctl-local",
                             model_dir=f"gs://tpuctl-local/r{i}", num_train_steps=300, save_checkpoints_steps=50,
                             job="bert-finetune", status="finished", preemptions=len(recoveries),
                             seconds_lost=sum(recoveries), seconds_by_state={"training": 600.0},
                             pricing={"accelerator_type": "v2-8", "zone": "us-central1-b", "tier": "preemptible",
                                      "usd_per_hour": 1.35},
                             goodput={"wall_s": 1200.0, "goodput_s": 600.0, "recovery_s": recoveries})
        runs.RunStore(bucket, rec.run_id).save(rec)
        runs.remember(rec)
    assert recovery_line() == "recovery 3m12s, measured over 3 preemption(s) of past v2-8 runs on local (their median)"
    doc = run_tpuctl_process("estimate", *SEED, "--accelerator-type", "v2-8", "--preemptible", "--on-demand",
                             "--json").json()
    got = {e["tier"]: (e["recovery_s"], e["recoveries_measured"]) for e in doc["estimates"]}
    assert got == {"preemptible": (192.0, 3), "on-demand": (None, 0)}


def test_a_deadline_closer_than_a_stop_is_refused_before_a_run_is_created():
    """A deadline inside the stop margin is refused before a run is created, not accepted only to
    stop the run at step 0 with a new TPU billed."""
    import time

    assert run_tpuctl_process("up", "lab").code == 0
    before = {p for p in home().rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 40))
    r = run_tpuctl_process("train", "lab", "--job", "examples/mlp/spec.yaml", "--code", "examples/mlp",
                           "--deadline", soon)
    line = _one_error(r, f"--deadline {soon} is ")
    assert "s away, within the 70 s a stop and a look take: the run would be stopped at once; give a deadline " \
           "more than 70 s ahead, e.g. --deadline " in line
    after = {p for p in home().rglob("*") if p.is_file() and not p.name.endswith(".lock")}
    assert after == before and not (Path(home()) / "runs").exists()


def test_a_job_too_small_for_the_flops_model_gets_no_estimate_never_0s(tmp_path):
    """No basis, no estimate: every tiny-BERT train on the local provider printed "estimate: 0s and
    $0.00"."""
    import time

    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "bert_config.json").write_text(json.dumps({
        "vocab_size": 150, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "hidden_act": "gelu", "max_position_embeddings": 64, "type_vocab_size": 2}))
    (tiny / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(150)))
    (tiny / "train.tsv").write_text("a\tb\n")
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    job = ["--job", "templates/bert-finetune-tiny.yaml", "--set", f"bert_dir={tiny}",
           "--set", f"train_file={tiny}/train.tsv"]
    deadline = time.time() + 7200
    r = run_tpuctl_process("train", "lab", *job, "--dry-run", "--deadline",
                           time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(deadline)))
    assert r.code == 0, r.err
    (plan,) = [ln for ln in r.out.splitlines() if "estimate" in ln]
    assert plan.startswith("no estimate: the published speed of a v2-8 (") and "estimate: 0s" not in plan
    assert " puts 300 steps at " in plan and ("too little for a FLOPs model: start-up and each step's fixed cost, "
                                              "which it leaves out, rule a job this small; train it once on the "
                                              "type and its measured rate is used") in plan
    # deadlines are shown to the second
    assert plan.endswith(f"; caps: deadline {time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(deadline))}")
    est = run_tpuctl_process("estimate", *job, "--accelerator-type", "v2-8", "--preemptible")
    _one_error(est, "cannot estimate job: bert-finetune: the published speed of a v2-8 (")
