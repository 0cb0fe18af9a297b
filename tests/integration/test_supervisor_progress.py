"""What the supervisor says and counts between two of its looks, on a simulated clock.

The supervisor on the local provider; the job is the test: it writes progress.json as the runner
does (step, checkpoint_step, started_at, step_time, first_step_time, resumed_from_step) and its
executor reports what the test says. What a user sees are the supervisor's lines (`tpuctl train`
in the foreground, the detached supervisor's log) and its time by state (`tpuctl cost`'s "as its
supervisor measured").
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

RUN = "lab-progress"


class Job:
    """The attempt as its executor reports it: running until the test says it exited."""

    job_on_tpu = True

    def __init__(self) -> None:
        self.phase: tuple[JobPhase, int | None] = (JobPhase.RUNNING, None)

    def start(self, rec, n, tpu, command) -> None:
        self.phase = (JobPhase.RUNNING, None)

    def poll(self, rec, n):
        return self.phase

    def stop(self, rec, n, grace: float = 60.0, *, hosts_dead: bool = False) -> None:
        return None

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
    provider = LocalProvider(home())
    return provider, RunStore(bucket, RUN), tmp_path / "model"


def _supervisor(provider, store: RunStore, model: Path, clock: Clock, *, recovering_since: float | None = None,
                steps: int = 400):
    """Attempt 2 started (after a preemption detected at ``recovering_since``, if given)."""
    tpu = provider.get_tpu(*next((t.zone, t.name) for t in provider.list_tpus()))
    rec = RunRecord(run_id=RUN, cluster="lab", provider="local", project="local", zone=tpu.zone,
                    bucket="gs://tpuctl-local", model_dir=str(model), num_train_steps=steps,
                    save_checkpoints_steps=50, status="running", attempts=2, preemptions=1,
                    attempt={"n": 2, "tpu_created_at": tpu.created_at, "started_at": clock.now, "zone": tpu.zone,
                             "workers": 1})
    if recovering_since is not None:
        rec.status = "recovering"
        rec.recovering = {"detected_at": recovering_since, "step": 160, "checkpoint_step": 150,
                          "cause": "the TPU was PREEMPTED", "preemptions": [1]}
    store.save(rec)
    spec = training.cluster_spec_for(provider, "lab", tpu, bucket=rec.bucket)
    said: list[str] = []
    job = Job()
    sup = Supervisor(provider, spec, store, job, lambda rec, n, tpu: {"workers": {"0": {}}}, where="test",
                     poll_s=0.05, log=said.append, clock=clock.time)
    sup.lease.acquire()
    return sup, job, said


def _progress(model: Path, **fields) -> None:
    model.mkdir(parents=True, exist_ok=True)
    record = {"run_id": None, "num_train_steps": 400, "status": "running", "loss": 2.0, "examples_per_sec": 100.0}
    (model / "progress.json").write_text(json.dumps({**record, **fields}))


def test_resumed_is_said_before_the_step_the_resumed_job_has_reached(lab):
    """The first look after the resume finds the job 75 steps past its checkpoint: the user reads
    that it resumed at 150, then where it is (it used to read `step 225/400` first)."""
    provider, store, model = lab
    clock = Clock(time.time())
    sup, _job, said = _supervisor(provider, store, model, clock, recovering_since=clock.now - 30)
    started = clock.now - 20
    _progress(model, step=225, checkpoint_step=150, resumed_from_step=150, started_at=started,
              step_time=clock.now - 1, first_step_time=clock.now - 8)
    assert sup.step() is False
    lines = [line for line in said if "resumed" in line or line.lstrip().startswith("step ")]
    assert lines == [(f"[{RUN}] resumed step=150 steps_lost=10 seconds_lost=22.0 preemptions=[1] "
                      f"program_started_at={started}"),
                     "  step 225/400, loss 2.0000, 100.0 examples/s, checkpoint 150"], said
    # the end of the recovery updated the run's goodput summary, saved with its record (a live
    # run's, as of now: what a fleet's `cost --since` reads before the run ends)
    kept = store.load().goodput
    assert kept is not None and kept["final"] is False and kept["capacity"] == "spot", kept


def test_the_last_line_names_the_checkpoint_saved_after_the_step(lab):
    """The job reports step 400, then saves ckpt-400: the user's last line says checkpoint 400 (it
    used to stay at `step 400/400 ... checkpoint 350`, the step having not moved)."""
    provider, store, model = lab
    clock = Clock(time.time())
    sup, job, said = _supervisor(provider, store, model, clock)
    _progress(model, step=400, checkpoint_step=350, started_at=clock.now - 60, step_time=clock.now)
    assert sup.step() is False
    _progress(model, step=400, checkpoint_step=400, started_at=clock.now - 60, step_time=clock.now,
              status="finished")
    job.phase = (JobPhase.EXITED, 0)
    assert sup.step() is True
    steps = [line for line in said if line.lstrip().startswith("step ")]
    assert steps == ["  step 400/400, loss 2.0000, 100.0 examples/s, checkpoint 350",
                     "  step 400/400, loss 2.0000, 100.0 examples/s, checkpoint 400"], said


def test_a_job_that_trains_and_finishes_between_two_looks_was_training(lab):
    """A short run (the README tour's 60 steps) resumes, trains to its end and exits between two
    looks of a supervisor: those seconds are training from its first new step on, not waiting or
    starting (it used to measure `starting 4s, waiting 45s` and no training)."""
    provider, store, model = lab
    clock = Clock(time.time())
    detected = clock.now - 10
    sup, job, _said = _supervisor(provider, store, model, clock, recovering_since=detected, steps=60)
    _progress(model, step=0, checkpoint_step=None, resumed_from_step=None, started_at=clock.now, step_time=None)
    assert sup.step() is False                    # the job starts up: still waiting
    clock.now += 10
    _progress(model, step=60, num_train_steps=60, checkpoint_step=60, resumed_from_step=None,
              started_at=clock.now - 10, first_step_time=clock.now - 6, step_time=clock.now - 1, status="finished")
    job.phase = (JobPhase.EXITED, 0)
    assert sup.step() is True
    spent = store.load().seconds_by_state
    assert spent == {"waiting": pytest.approx(4.0, abs=0.05), "training": pytest.approx(6.0, abs=0.05)}, spent
