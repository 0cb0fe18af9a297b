"""The supervisor enforces a run's budget and deadline (the same Supervisor runs on the host VM, so
the caps hold with the laptop closed): on the local provider, a simulated clock, and a job that is
the test (it writes progress.json as the runner does and checkpoints when it is stopped).

A cap that is reached stops the attempt gracefully (the job's checkpoint), deletes the TPU and
keeps the host VM, ends the run ``stopped`` with the cap and its reason, and records the deletion
in the cost ledger; a run within its caps is never stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from provision.basics.config import home
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.cluster import ledger
from provision.runs import training
from provision.runs.policy import JobPhase
from provision.runs.store import RunRecord, RunStore, remember
from provision.runs.supervisor import Supervisor

RUN = "lab-caps"
LOOK_S = 60.0          # simulated seconds between two looks
RATE = 2.0             # steps/s the job trains at


class Job:
    """The attempt as its executor reports it; stop() is the graceful one: a checkpoint, exit 42."""

    job_on_tpu = True

    def __init__(self, model: Path) -> None:
        self.model = model
        self.phase: tuple[JobPhase, int | None] = (JobPhase.RUNNING, None)
        self.stops: list[float] = []

    def start(self, rec, n, tpu, command) -> None:
        self.phase = (JobPhase.RUNNING, None)

    def poll(self, rec, n):
        return self.phase

    def stop(self, rec, n, grace: float = 60.0, *, hosts_dead: bool = False) -> None:
        self.stops.append(grace)
        p = json.loads((self.model / "progress.json").read_text())
        p.update(checkpoint_step=p["step"], status="preempted")
        (self.model / "progress.json").write_text(json.dumps(p))
        self.phase = (JobPhase.EXITED, 42)

    def blocked(self, rec) -> str | None:
        return None


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def lab(tpuctl, tmp_path):
    assert tpuctl("up", "lab", "--preemptible").code == 0
    bucket = local_bucket("tpuctl-local")
    if not bucket.exists():
        bucket.create("local")
    return LocalProvider(home()), RunStore(bucket, RUN), tmp_path / "model"


def _supervise(provider, store: RunStore, model: Path, clock: Clock, **caps) -> tuple[Supervisor, Job]:
    tpu = provider.get_tpu(*next((t.zone, t.name) for t in provider.list_tpus()))
    rec = RunRecord(run_id=RUN, cluster="lab", provider="local", project="local", zone=tpu.zone,
                    bucket="gs://tpuctl-local", model_dir=str(model), num_train_steps=100_000,
                    save_checkpoints_steps=100, status="running", attempts=1, created_at=clock.now,
                    attempt={"n": 1, "tpu_created_at": tpu.created_at, "started_at": clock.now, "zone": tpu.zone,
                             "workers": 1},
                    pricing={"accelerator_type": tpu.accelerator_type, "zone": tpu.zone, "tier": "preemptible",
                             "usd_per_hour": 1.35, "interruptions_per_hour": 1 / 24, "recovery_s": 600.0},
                    **caps)
    store.save(rec)
    remember(rec)                  # as train does: status and cost find the run by its cluster
    spec = training.cluster_spec_for(provider, "lab", tpu, bucket=rec.bucket)
    job = Job(model)
    sup = Supervisor(provider, spec, store, job, lambda rec, n, tpu: {"workers": {"0": {}}}, where="test",
                     poll_s=0.05, log=lambda _m: None, clock=clock.time)
    sup.lease.acquire()
    return sup, job


def _train(sup: Supervisor, job: Job, model: Path, clock: Clock, looks: int) -> int:
    """Look after look, the job trains RATE steps a second (its first step 5 s after it started);
    returns the look at which the supervisor ended the run."""
    started = clock.now
    model.mkdir(parents=True, exist_ok=True)
    for look in range(looks):
        step = int(max(0.0, clock.now - started - 5) * RATE)
        if job.phase[0] == JobPhase.RUNNING:
            (model / "progress.json").write_text(json.dumps({
                "run_id": None, "step": step, "num_train_steps": 100_000, "status": "running",
                "started_at": started, "first_step_time": started + 5 if step else None,
                "step_time": clock.now, "checkpoint_step": step // 100 * 100, "examples_per_sec": RATE * 32}))
        if sup.step():
            return look
        clock.now += LOOK_S
    raise AssertionError(f"the run did not end in {looks} looks")


def test_a_budget_stops_the_run_on_a_checkpoint_and_deletes_its_tpu(lab, tpuctl):
    provider, store, model = lab
    clock = Clock(time.time())
    sup, job = _supervise(provider, store, model, clock, budget_usd=1.0)
    looks = _train(sup, job, model, clock, looks=80)
    rec = store.load()
    assert rec.status == "stopped" and rec.stopped_by == "budget", rec.reason
    assert rec.reason.startswith("budget: $0.9") and "would pass it" in rec.reason
    assert job.stops, "the attempt was not stopped gracefully"
    assert rec.last_progress["checkpoint_step"] == rec.last_progress["step"] > 0
    spent = sum(rec.pace["usd_by_state"].values())
    assert 0.9 < spent <= 1.0, spent
    assert 40 <= looks <= 46, looks                     # $1 at $1.35/h is 44 minutes
    assert provider.list_tpus() == [] and provider.list_vms(None, None), "the TPU goes, the host VM stays"
    kinds = [e["event"] for e in store.events()]
    assert kinds.index("cap_warning") < kinds.index("cap_reached") < kinds.index("stopped")
    assert kinds.count("cap_warning") == 1
    deleted = [e for e in ledger.read_local("local", provider.project, "lab") if e["event"] == "tpu_deleted"]
    assert [e["by"] for e in deleted] == ["budget cap"] and deleted[0]["run_id"] == RUN
    st = tpuctl("status", "--json").json()["clusters"][0]
    assert st["tpu"] is None and st["run"]["status"] == "stopped"
    assert st["run"]["pace"]["stopped_by"] == "budget" and st["run"]["pace"]["spent_usd"] == pytest.approx(spent)
    text = tpuctl("status").out
    assert f"{RUN} stopped: budget: $0.9" in text and "budget $1 (" in text


def test_a_deadline_the_measured_rate_cannot_meet_stops_the_run_early(lab):
    provider, store, model = lab
    clock = Clock(time.time())
    sup, job = _supervise(provider, store, model, clock, deadline=clock.now + 3600)
    looks = _train(sup, job, model, clock, looks=10)
    rec = store.load()
    assert rec.status == "stopped" and rec.stopped_by == "deadline", rec.reason
    assert "past the deadline" in rec.reason and looks <= 3         # as soon as the rate is measured
    assert job.stops and provider.list_tpus() == []
    events = store.events()
    crossed = [e for e in events if e["event"] == "projection_crossed"]
    assert [(e["cap"], e["over"]) for e in crossed] == [("deadline", True)]
    assert [e["stopped_by"] for e in events if e["event"] == "stopped"] == ["deadline"]


def test_a_run_within_its_caps_is_never_stopped(lab):
    provider, store, model = lab
    clock = Clock(time.time())
    sup, job = _supervise(provider, store, model, clock, budget_usd=100.0, deadline=clock.now + 200_000)
    for _ in range(5):
        clock.now += LOOK_S
        assert sup.step() is False
    assert job.stops == [] and provider.list_tpus() != []
    rec = store.load()
    assert rec.status == "running" and rec.stopped_by is None
    assert [e["event"] for e in store.events() if e["event"] in ("cap_warning", "projection_crossed")] == []
