"""How long a recovery waits for the hosts of the attempt it replaces, on a simulated clock.

The supervisor on the local provider, its executor reading heartbeats and exit records from a
real (local) bucket, the hosts' agents played by the test. The executor's clock and sleep are the
test's: every second the supervisor waits for a host is a simulated one, so a wait shows as
simulated time before the recreate begins (the provider's ``delete_tpu``), and the test takes no
wall time for it.

- A TPU that was PREEMPTED took the hosts that ran on it: their last heartbeats look fresh for
  ``ALIVE_STALE_S`` more, and a recovery that waits for them to go stale loses that much on
  every preemption.
- A TPU that is alive (a group restart after one host exited 42), or a preempted TPU Node (its
  job runs on the host VM, which the preemption does not touch): the hosts still at work are
  asked to stop, and the recreate waits until they have.
"""

from __future__ import annotations

import time

import pytest

from provision.basics.config import home
from provision.cloud.base import Arch
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.runs import training
from provision.runs.executors import ALIVE_STALE_S, BucketExecutor, LocalExecutor
from provision.runs.store import RunRecord, RunStore
from provision.runs.supervisor import Supervisor

RUN = "lab-recovery-wait"


class Clock:
    """Simulated time: ``sleep`` moves it on (and lets the hosts played by the test act)."""

    def __init__(self) -> None:
        self.now = time.time()
        self.slept = 0.0
        self.hosts: list = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        for host in self.hosts:
            host()


class Recorded(LocalProvider):
    """The local provider, noting on the simulated clock when the recreate deletes the TPU."""

    clock: Clock
    deleted_at: float | None = None

    def delete_tpu(self, zone, name):
        if self.deleted_at is None:
            self.deleted_at = self.clock.now
        return super().delete_tpu(zone, name)


@pytest.fixture
def lab(tpuctl):
    assert tpuctl("up", "lab", "--preemptible").code == 0
    bucket = local_bucket("tpuctl-local")
    if not bucket.exists():
        bucket.create("local")
    clock = Clock()
    provider = Recorded(home())
    provider.clock = clock
    return provider, clock, RunStore(bucket, RUN)


def _attempt(provider, clock: Clock, store: RunStore, workers: int) -> RunRecord:
    """Attempt 1 has been training for a minute on the cluster's TPU."""
    tpu = provider.get_tpu(*next((t.zone, t.name) for t in provider.list_tpus()))
    rec = RunRecord(run_id=RUN, cluster="lab", provider="local", project="local", zone=tpu.zone,
                    bucket="gs://tpuctl-local", model_dir=str(home() / "model"), num_train_steps=100,
                    save_checkpoints_steps=10, status="running", attempts=1,
                    attempt={"n": 1, "tpu_created_at": tpu.created_at, "started_at": clock.now - 60,
                             "zone": tpu.zone, "workers": workers})
    rec.tpu_seen = tpu.created_at
    store.save(rec)
    return rec


def _beat(store: RunStore, clock: Clock, worker: str) -> None:
    store.write_json(f"{store.attempt_prefix(1)}/alive-{worker}.json", {"time": clock.now, "pid": 1})


def _step(provider, store: RunStore, executor) -> tuple[Supervisor, list[str], float]:
    said: list[str] = []
    rec = store.load()
    spec = training.cluster_spec_for(provider, "lab", provider.get_tpu(rec.zone, "lab"), bucket=rec.bucket)
    sup = Supervisor(provider, spec, store, executor, lambda rec, n, tpu: {"workers": {"0": {}}}, where="test",
                     poll_s=0.05, log=said.append)
    sup.lease.acquire()
    started = time.monotonic()
    assert sup.step() is False
    return sup, said, time.monotonic() - started


def _agent(store: RunStore, clock: Clock, worker: str, stops_after: float) -> dict:
    """A host still at work: it beats until it reads stop.json, and exits 42 ``stops_after`` later."""
    seen: dict = {}

    def act() -> None:
        if "exited_at" in seen:
            return
        if "stop_read_at" not in seen and store.read_json(f"{store.attempt_prefix(1)}/stop.json") is not None:
            seen["stop_read_at"] = clock.now
        if "stop_read_at" in seen and clock.now >= seen["stop_read_at"] + stops_after:
            store.write_json(f"{store.attempt_prefix(1)}/exit-{worker}.json", {"code": 42, "time": clock.now})
            seen["exited_at"] = clock.now
        else:
            _beat(store, clock, worker)

    clock.hosts.append(act)
    return seen


@pytest.mark.parametrize("kind", ["local", "tpu-vm"])
def test_a_preemption_is_recovered_without_waiting_for_the_heartbeats_of_the_hosts_it_killed(lab, kind):
    provider, clock, store = lab
    rec = _attempt(provider, clock, store, workers=2)
    for worker in ("0", "1"):
        _beat(store, clock, worker)             # both hosts beat a moment before the preemption
    clock.now += 1
    preempted_at = clock.now
    provider.simulate_preemption(rec.zone, "lab")
    executor = LocalExecutor(provider, store, clock=clock.time, sleep=clock.sleep) if kind == "local" else \
        BucketExecutor(store, Arch.VM, clock=clock.time, sleep=clock.sleep)

    sup, said, wall = _step(provider, store, executor)

    kinds = [e["event"] for e in store.events()]
    assert kinds == ["preempted", "recreated"], said
    assert provider.deleted_at is not None, "the TPU was not recreated"
    # the recreate began at once: not when the dead hosts' heartbeats went stale (ALIVE_STALE_S)
    assert provider.deleted_at - preempted_at < 2, f"waited {provider.deleted_at - preempted_at:.0f} s for dead hosts"
    assert clock.slept == 0
    # and not on the system clock either (the executor must wait, if at all, on the clock it was given)
    assert wall < ALIVE_STALE_S / 2, f"the step took {wall:.0f} s"
    # a host that did survive is still asked to stop
    assert store.read_json(f"{store.attempt_prefix(1)}/stop.json") is not None
    assert sup.rec.attempt is None and sup.rec.preemptions == 1


def test_a_group_restart_on_a_live_tpu_waits_until_the_host_still_at_work_has_stopped(lab):
    """Worker 0 exited 42 while worker 1 still works (blocked in an all-reduce with no peer, and
    holding its TPU): the recovery asks it to stop and waits for its exit before touching the TPU."""
    provider, clock, store = lab
    _attempt(provider, clock, store, workers=2)
    store.write_json(f"{store.attempt_prefix(1)}/exit-0.json", {"code": 42, "time": clock.now})
    _beat(store, clock, "1")
    host = _agent(store, clock, "1", stops_after=3)

    _sup, said, _wall = _step(provider, store, BucketExecutor(store, Arch.VM, clock=clock.time, sleep=clock.sleep))

    assert "exited_at" in host, f"worker 1 was never asked to stop, or not waited for: {said}"
    assert provider.deleted_at is not None and provider.deleted_at >= host["exited_at"], \
        "the TPU was recreated while a host of the attempt was still at work"


def test_a_preempted_tpu_node_still_waits_for_its_job_on_the_host_vm(lab):
    """A TPU Node's job runs on the host VM, which a preemption of the TPU does not touch."""
    provider, clock, store = lab
    rec = _attempt(provider, clock, store, workers=1)
    _beat(store, clock, "0")
    host = _agent(store, clock, "0", stops_after=4)
    provider.simulate_preemption(rec.zone, "lab")

    _sup, said, _wall = _step(provider, store, BucketExecutor(store, Arch.NODE, clock=clock.time, sleep=clock.sleep))

    assert "exited_at" in host, f"the job on the host VM was never asked to stop, or not waited for: {said}"
    assert provider.deleted_at is not None and provider.deleted_at >= host["exited_at"]
