"""`tpuctl sweep` on the local provider: real tiny fine-tunes as trials, on a pool of local TPUs.

Kept cheap: 40-step trials of the tiny BERT, at most two at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.xdist_group("tf-e2e")]

STEPS = 40
STEPS_PRUNE = 160
FAST = {"TPUCTL_HEARTBEAT_SECONDS": "0.5"}


def write_spec(path: Path, tiny: Path, values: list, *, extra: str = "", steps: int = STEPS) -> Path:
    path.write_text(f"""
job: {REPO}/templates/bert-finetune-tiny.yaml
set: {{bert_dir: {tiny}, train_file: {tiny}/train.tsv, dev_file: {tiny}/dev.tsv, num_train_steps: {steps},
       save_checkpoints_steps: 20, steps_per_execution: 10}}
metric: eval_accuracy
goal: maximize
method: grid
parameters:
  learning_rate: {{values: {json.dumps(values)}}}
{extra}
""")
    return path


def sweep_dir(home: Path, sweep_id: str) -> Path:
    return home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "sweeps" / sweep_id


def trials(home: Path, sweep_id: str) -> dict[int, dict]:
    out = {}
    for p in (sweep_dir(home, sweep_id) / "trials").glob("*.json"):
        try:
            d = json.loads(p.read_text())
        except ValueError:
            continue
        out[d["trial"]] = d
    return out


def run_events(home: Path, run_id: str) -> list[str]:
    path = home / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs" / run_id / "events.jsonl"
    return [json.loads(line)["event"] for line in path.read_text().splitlines()]


def no_sweep_tpu_left() -> None:
    status = run_tpuctl_process("status", "--json").json()
    assert [c["name"] for c in status["clusters"]] == [], status["clusters"]


def start(spec: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(TPUCTL_BIN), "sweep", str(spec), "--poll", "1", "--json", *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **FAST})


@pytest.mark.long      # make test runs the same under chaos: tests/chaos/test_sweeps_chaos.py seed 5
def test_grid_with_a_preempted_pool_tpu_finishes_every_trial_and_deletes_the_pool(tiny_bert, tmp_path):
    home = Path(os.environ["TPUCTL_HOME"])
    spec = write_spec(tmp_path / "sweep.yaml", tiny_bert, [3.0e-4, 1.0e-3, 3.0e-3])
    proc = start(spec, "--max-concurrent", "2", "--preemptible")
    preempted: tuple[int, str] | None = None
    deadline = time.time() + 240
    while proc.poll() is None and time.time() < deadline and preempted is None:
        time.sleep(0.3)
        ids = [p.name for p in (home / "sweeps").glob("sweep-*") if p.is_dir()] if (home / "sweeps").is_dir() else []
        if not ids:
            continue
        for n, t in trials(home, ids[0]).items():
            if t["state"] != "running" or not t.get("model_dir"):
                continue
            try:
                progress = json.loads((Path(t["model_dir"]) / "progress.json").read_text())
            except (OSError, ValueError):
                continue
            if progress.get("status") == "running" and (progress.get("checkpoint_step") or 0) >= 20 \
                    and (progress.get("step") or 0) < STEPS:
                if run_tpuctl_process("simulate", "preempt", t["cluster"]).code == 0:
                    preempted = (n, t["run"])
                break
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert preempted is not None, err[-2000:]
    doc = json.loads(out)
    assert doc["state"] == "finished" and doc["metric"] == "eval_accuracy" and doc["goal"] == "maximize"
    assert [t["state"] for t in doc["trials"]] == ["finished"] * 3
    assert sorted(t["params"]["learning_rate"] for t in doc["trials"]) == [3.0e-4, 1.0e-3, 3.0e-3]
    best = max(doc["trials"], key=lambda t: t["metric"])
    assert doc["best"]["trial"] == best["trial"] and doc["best"]["metric"] == best["metric"]
    assert all(t["steps"] == STEPS for t in doc["trials"])
    n, run = preempted
    hit = next(t for t in doc["trials"] if t["trial"] == n)
    assert hit["run"] == run and hit["preemptions"] == 1
    kinds = run_events(home, run)
    assert "preempted" in kinds and "resumed" in kinds and kinds[-1] == "finished", kinds
    # the pool: at most two TPUs, reused (three trials on two clusters), none left
    assert len({t["cluster"] for t in doc["trials"]}) == 2
    assert "pool: reusing" in err
    no_sweep_tpu_left()
    # the table marks the best trial
    table = run_tpuctl_process("sweep", "status", doc["sweep"])
    assert table.code == 0
    marked = [line for line in table.out.splitlines() if line.startswith("*")]
    assert len(marked) == 1 and f"learning_rate={best['params']['learning_rate']:.4g}" in marked[0]


def _hopeless_last_seed(values: list) -> int:
    """A grid seed whose order puts the hopeless value last (Optuna shuffles the grid by seed)."""
    import optuna

    for seed in range(50):
        study = optuna.create_study(sampler=optuna.samplers.GridSampler({"learning_rate": values}, seed=seed))
        first = study.ask({"learning_rate": optuna.distributions.CategoricalDistribution(values)})
        if first.params["learning_rate"] != values[-1]:
            return seed
    raise AssertionError("no seed")


@pytest.mark.long
def test_asha_prunes_a_hopeless_learning_rate_early(tiny_bert, tmp_path):
    """... and the sweep's channel hears of its best trial and its end (docs/notify.md)."""
    from tests.receivers import http_receiver

    hook = http_receiver()
    added = subprocess.run([str(TPUCTL_BIN), "notify", "add", "hook", "--webhook"], input=f"{hook.url}/sweeps\n",
                           text=True, capture_output=True, timeout=60, check=False)
    assert added.returncode == 0, added.stderr
    values = [1.0e-3, 50.0]
    seed = _hopeless_last_seed(values)
    # enough steps after the first rung (20) for the controller to see it and stop the trial on a
    # loaded machine: a tiny trial runs 60 steps in seconds
    spec = write_spec(tmp_path / "sweep.yaml", tiny_bert, values, steps=STEPS_PRUNE,
                      extra=f"pruner: asha\neval_every_steps: 20\nseed: {seed}")
    r = run_tpuctl_process("sweep", str(spec), "--poll", "1", "--json", "--notify", "hook", env=FAST, timeout=300)
    hook.close()
    assert r.code == 0, r.err[-3000:]
    doc = r.json()
    told = [(m.json()["kind"], m.json()["fields"].get("params")) for m in hook.received]
    assert told == [("sweep_best", {"learning_rate": 1.0e-3}), ("sweep_ended", {"learning_rate": 1.0e-3})], told
    by_lr = {t["params"]["learning_rate"]: t for t in doc["trials"]}
    assert by_lr[1.0e-3]["state"] == "finished" and by_lr[1.0e-3]["steps"] == STEPS_PRUNE
    hopeless = by_lr[50.0]
    assert hopeless["state"] == "pruned", (hopeless, r.err[-2000:])
    assert hopeless["steps"] < STEPS_PRUNE
    assert doc["best"]["params"] == {"learning_rate": 1.0e-3}
    no_sweep_tpu_left()


@pytest.mark.long      # make test kills the controller in tests/chaos/test_sweeps_chaos.py (seeds 0 and 5)
def test_a_killed_controller_resumes_without_repeating_a_finished_trial(tiny_bert, tmp_path):
    home = Path(os.environ["TPUCTL_HOME"])
    spec = write_spec(tmp_path / "sweep.yaml", tiny_bert, [1.0e-3, 3.0e-3])
    r = run_tpuctl_process("sweep", str(spec), "--detach", "--poll", "1", "--json", env=FAST)
    assert r.code == 0, r.err
    sweep_id = r.json()["sweep"]
    deadline = time.time() + 200
    seen: dict[int, dict] = {}
    while time.time() < deadline:
        seen = trials(home, sweep_id)
        if seen.get(0, {}).get("state") == "finished" and seen.get(1, {}).get("run"):
            break
        time.sleep(0.3)
    assert seen.get(1, {}).get("run"), seen
    lease = json.loads((sweep_dir(home, sweep_id) / "controller.json").read_text())
    os.kill(lease["pid"], signal.SIGKILL)
    status = run_tpuctl_process("sweep", "status", sweep_id, "--json").json()
    assert status["state"] == "running" and "controller is gone" in (status["reason"] or "")
    resumed = run_tpuctl_process("sweep", "resume", sweep_id, "--json", env=FAST, timeout=240)
    assert resumed.code == 0, resumed.err[-3000:]
    doc = resumed.json()
    assert doc["state"] == "finished"
    assert [t["trial"] for t in doc["trials"]] == [0, 1]                  # nothing asked again
    assert [t["state"] for t in doc["trials"]] == ["finished", "finished"]
    assert doc["trials"][0]["run"] == seen[0]["run"]                      # trial 0 not repeated
    assert doc["trials"][1]["run"] == seen[1]["run"]                      # trial 1's run adopted
    assert run_events(home, seen[0]["run"]).count("created") == 1
    no_sweep_tpu_left()


def test_budget_stops_starting_trials(tiny_bert, tmp_path):
    from provision.catalog import accelerators, prices
    from provision.sweeps.budget import MIN_TRIAL_S

    hourly = prices.tpu_hourly(accelerators.parse("v2-8"), preemptible=False)
    budget = hourly * (MIN_TRIAL_S + 1) / 3600     # one trial's estimate, and not a second
    spec = write_spec(tmp_path / "sweep.yaml", tiny_bert, [1.0e-3, 3.0e-3, 1.0e-2])
    r = run_tpuctl_process("sweep", str(spec), "--budget-usd", f"{budget:.6f}", "--poll", "1", "--json",
                           env=FAST, timeout=240)
    assert r.code == 0, r.err[-3000:]
    doc = r.json()
    assert len(doc["trials"]) == 1 and doc["trials"][0]["state"] == "finished"
    assert doc["state"] == "finished" and "budget" in doc["reason"]
    assert 0 < doc["cost_usd"] <= budget
    # the budget's rate says where it holds: skypilot-catalog vms.csv tpu-v2-8 us-central1 4.5
    assert doc["hourly_usd"] == hourly == 4.5
    assert (doc["price"]["region"], doc["price"]["tier"]) == ("us-central1", "on-demand") and doc["price"]["date"]
    no_sweep_tpu_left()


@pytest.mark.parametrize("values, extra, args, message", [
    ([1.0e-3], "", ("--max-trials", "1"), None),     # the good one: a dry run creates nothing either
    ([1.0e-3, 3.0e-3], "", ("--max-trials", "1"), "the grid has 2 points, more than --max-trials 1"),
    ([1.0e-3], "metric: exact_match", (), "metric 'exact_match' is never reported by this job"),
    ([1.0e-3], "", ("--accelerator-type", "v9-8"), "v9-8"),
    ([-1.0], "", (), "parameter learning_rate value -1.0: learning_rate is -1.0"),
])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tiny_bert, tmp_path, tpuctl, values, extra, args, message):
    home = Path(os.environ["TPUCTL_HOME"])
    spec = write_spec(tmp_path / "sweep.yaml", tiny_bert, values)
    if extra:
        spec.write_text(spec.read_text().replace("metric: eval_accuracy", extra))
    r = tpuctl("sweep", str(spec), *args, *(("--dry-run",) if message is None else ()))
    if message is None:
        assert r.code == 0 and "nothing was created" in r.out
    else:
        assert r.code == 2, r.err
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tpuctl: error: ") and message in lines[0], r.err
    assert not (home / "sweeps").exists() and not (home / "local" / "buckets").exists()
    assert tpuctl("status", "--json").json()["clusters"] == []
