"""`sweep stop` right after `sweep resume` (found by `python -m tests.chaos sweeps`, seed 3): the
resumed controller had read the sweep before it held the sweep's lease, the stop (finding no live
controller yet) stopped the trials and deleted the pool, and the controller then took the released
lease and went on from its stale copy: it marked the sweep running again, queued the stopped
trial, created a pool TPU, and died on a journal batch the stop had written. A controller reads the
sweep only once the lease is its own. Nothing here trains."""

from __future__ import annotations

import json

import pytest

from provision import cluster
from provision.cloud.storage import open_bucket
from provision.commands.common import open_provider, resolve_target
from provision.runs import store as runs
from provision.sweeps import create
from provision.sweeps import spec as sweepspec
from provision.sweeps.controller import Controller
from provision.sweeps.store import SweepStore, TrialRecord
from provision.sweeps.study import Study
from tests.conftest import REPO

pytestmark = pytest.mark.tf        # the tiny BERT directory is written with TensorFlow


def _sweep(tmp_path, bert):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"job: {REPO}/templates/bert-finetune-tiny.yaml\n"
                    f"set: {{bert_dir: {bert}, train_file: {bert}/train.tsv, dev_file: {bert}/dev.tsv, num_train_steps: 4}}\n"
                    "metric: eval_accuracy\ngoal: maximize\nmethod: grid\n"
                    "parameters:\n  learning_rate: {values: [0.001, 0.003]}\n")
    target = resolve_target("local", None)
    prov = open_provider(target)
    zone = cluster.default_zone(target)
    p = create.plan(str(spec), provider="local", project=None, bucket=runs.LOCAL_DEFAULT_BUCKET, zones=[zone],
                    accelerator_type="v2-8", preemptible=True, spot=False, max_concurrent=1, max_trials=None,
                    budget_usd=None, poll_s=0.5, max_failures=1)
    bucket = open_bucket(runs.LOCAL_DEFAULT_BUCKET, target)
    if not bucket.exists():
        bucket.create("local")
    store = SweepStore(bucket, p.record.sweep_id)
    create.write(store, p)
    # trial 0 was asked (the journal says running) and its controller was killed before it started
    study = Study(store, p.spec, eval_every=0, num_train_steps=4)
    asked = study.ask()
    store.save_trial(TrialRecord(trial=asked.number, params=asked.params, state="running"))
    rec = store.load()
    rec.state = "running"
    store.save(rec)
    return prov, target, store


def test_a_controller_started_before_a_stop_does_not_revive_the_stopped_sweep(tmp_path, tiny_bert):
    prov, target, store = _sweep(tmp_path, tiny_bert)
    said: list[str] = []
    resumed = Controller(prov, target, store, where="foreground", log=said.append)   # `sweep resume` starting
    Controller(prov, target, store, where="stop", log=said.append).stop_here("stopped by tpuctl sweep stop")

    rec = resumed.run()                   # takes the lease the stop released

    assert rec.state == "stopped" and store.load().state == "stopped"
    assert [t.state for t in store.trials()] == ["stopped"]
    again = Study(store, sweepspec.from_dict(store.load().spec), eval_every=0, num_train_steps=4)
    assert again.states() == {0: "failed"}                  # nothing asked or told since (stopped = failed)
    assert prov.list_tpus(None, None) == []                                           # no pool TPU created
    assert json.loads(store.bucket.read_bytes(store.name("controller.json")))["released"]
