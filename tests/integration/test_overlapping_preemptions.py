"""Overlapping outages, deterministically: the supervisor on the local provider, its job scripted.

The job stands in for training without TensorFlow: each poll of the executor moves it 10 steps on
while its TPU is READY, with a checkpoint every 20 steps, and it writes progress.json as the real
runner does (started_at, step_time, resumed_from_step), which is how the supervisor sees a resume.
Preemptions are the local provider's own (`simulate_preemption`: the TPU goes PREEMPTED); the
second one is injected from inside the recreate of the first recovery, the instant the new TPU is
asked for, so it is still CREATING when it is preempted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from provision.basics.config import home
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.runs import training
from provision.runs.policy import JobPhase
from provision.runs.store import RunRecord, RunStore
from provision.runs.supervisor import Supervisor
from tests.conftest import run_tpuctl_process

STEPS, CKPT = 100, 20


class ScriptedJob:
    """An executor whose job trains in steps of 10 on a READY TPU and resumes from its checkpoint."""

    def __init__(self, provider: LocalProvider, model_dir: Path, preempt_at: int | None):
        self.provider, self.model_dir = provider, model_dir
        self.preempt_at = preempt_at     # first attempt only: preempt the TPU when it reaches this step
        self.step = self.ckpt = 0
        self.started: list[int] = []
        self.progress: dict = {}

    def _write(self, **fields) -> None:
        self.progress.update(fields)
        self.model_dir.mkdir(parents=True, exist_ok=True)
        (self.model_dir / "progress.json").write_text(json.dumps(
            {"run_id": None, "step": self.step, "num_train_steps": STEPS, "checkpoint_step": self.ckpt,
             **self.progress}))

    def start(self, rec, n, tpu, command) -> None:
        self.started.append(n)
        self.step = self.ckpt                           # restored from the newest checkpoint
        self.progress = {"started_at": time.time(), "resumed_from_step": self.ckpt}
        self._write(step_time=None, status="running")

    def poll(self, rec, n):
        tpu = self.provider.get_tpu(rec.zone, rec.cluster)
        if tpu is None or tpu.state.value != "READY":
            return JobPhase.RUNNING, None            # the supervisor acts on the TPU's state
        if self.step >= STEPS:
            return JobPhase.EXITED, 0
        time.sleep(0.005)
        self.step += 10
        if self.step % CKPT == 0:
            self.ckpt = self.step
        status = "finished" if self.step >= STEPS else "running"
        self._write(step_time=time.time(), status=status)
        if self.preempt_at is not None and n == 1 and self.step >= self.preempt_at:
            self.preempt_at = None
            self.provider.simulate_preemption(tpu.zone, tpu.name)
        return JobPhase.RUNNING, None

    job_on_tpu = True

    def stop(self, rec, n, grace: float = 60.0, *, hosts_dead: bool = False) -> None:
        return None

    def blocked(self, rec) -> str | None:
        return None


class PreemptsItsRecreate(LocalProvider):
    """The local provider, but the TPU asked for by the first recreate is preempted at once."""

    creates = 0
    preempt_create = 2       # the first create is `up`'s, the second the first recovery's

    def create_tpu(self, spec, zone, cidr):
        op = super().create_tpu(spec, zone, cidr)
        type(self).creates += 1
        if type(self).creates == self.preempt_create:
            self.simulate_preemption(zone, spec.name)       # still CREATING: the recovery is under way
        return op


@pytest.fixture
def lab(monkeypatch):
    for var, value in (("TPUCTL_LOCAL_TPU_CREATE_SECONDS", "0.1"), ("TPUCTL_LOCAL_VM_CREATE_SECONDS", "0.05"),
                       ("TPUCTL_LOCAL_DELETE_SECONDS", "0.05")):
        monkeypatch.setenv(var, value)
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0


def _supervise(provider, tmp_path: Path, job_preempt_at: int):
    store = RunStore(local_bucket("tpuctl-local"), "lab-overlap")
    tpu = provider.get_tpu(*next((t.zone, t.name) for t in provider.list_tpus()))
    rec = RunRecord(run_id="lab-overlap", cluster="lab", provider="local", project="local", zone=tpu.zone,
                    bucket="gs://tpuctl-local", model_dir=str(tmp_path / "model"), num_train_steps=STEPS,
                    save_checkpoints_steps=CKPT)
    store.save(rec)
    spec = training.cluster_spec_for(provider, "lab", tpu, bucket=rec.bucket)
    job = ScriptedJob(provider, tmp_path / "model", preempt_at=job_preempt_at)
    said: list[str] = []
    sup = Supervisor(provider, spec, store, job, lambda rec, n, tpu: {"workers": {"0": {}}}, where="test",
                     poll_s=0.05, log=said.append)
    return sup.run(), store.events(), job


def test_a_preemption_during_the_first_recovery_counts_twice_and_one_resume_ends_both(lab, tmp_path):
    PreemptsItsRecreate.creates = 1                  # `up` (another process) made the first TPU
    provider = PreemptsItsRecreate(home())
    rec, events, job = _supervise(provider, tmp_path, job_preempt_at=50)
    kinds = [e["event"] for e in events]
    assert rec.status == "finished" and rec.step == STEPS, (rec, kinds)
    assert rec.preemptions == 2 and rec.failures == 0, kinds
    preempted = [e for e in events if e["event"] == "preempted"]
    assert [e["preemption"] for e in preempted] == [1, 2]
    assert "during_recovery" not in preempted[0] and preempted[1]["during_recovery"] is True
    assert preempted[1]["tpu_state"] == "PREEMPTED" and "being recreated" in preempted[1]["cause"]
    resumed = [e for e in events if e["event"] == "resumed"]
    assert len(resumed) == 1 and resumed[0]["preemptions"] == [1, 2]
    # the job resumed at the checkpoint it had before the first preemption; the loss counted once
    assert resumed[0]["step"] == 40 and resumed[0]["steps_lost"] == 10 and rec.steps_lost == 10
    assert kinds.count("recreate_failed") == 1 and kinds.count("recreated") == 1
    assert job.started == [1, 2] and rec.attempts == 2
    assert kinds[-1] == "finished"
    # its goodput summary: two preemptions, one outage and so one recovery; no price, no dollars
    g = rec.goodput
    assert g["final"] and g["preemptions"] == 2 and len(g["recovery_s"]) == 1 and g["capacity"] == "spot", g
    assert g["preemption_s"] > 0 and g["badput_usd"] is None


def test_a_recreate_that_fails_without_a_preemption_is_not_another_one(lab, tmp_path):
    """A stockout while recreating leaves the TPU gone: that is the same outage, still recovering."""

    class StockedOutOnce(LocalProvider):
        creates = 0

        def create_tpu(self, spec, zone, cidr):
            type(self).creates += 1
            self.stockout_zones = {zone} if type(self).creates == 1 else set()
            return super().create_tpu(spec, zone, cidr)

    provider = StockedOutOnce(home())
    rec, events, _job = _supervise(provider, tmp_path, job_preempt_at=50)
    kinds = [e["event"] for e in events]
    assert rec.status == "finished" and rec.preemptions == 1, kinds
    assert kinds.count("preempted") == 1 and kinds.count("recreate_failed") == 1
    assert [e["preemptions"] for e in events if e["event"] == "resumed"] == [[1]]
