"""A multi-host slice's attempt is one group: every host must beat, and the hosts that run no job
(the workers of a pod slice whose TPU servers worker 0's client drives) report until the job ends."""

from __future__ import annotations

import time

import pytest

from provision.basics.config import Target
from provision.cloud.base import Arch
from provision.cloud.storage import open_bucket
from provision.host.agent import serve_attempt
from provision.runs.executors import ALIVE_STALE_S, BucketExecutor
from provision.runs.policy import JobPhase
from provision.runs.store import RunRecord, RunStore


class Beats:
    """The bucket as the executor reads it: heartbeats and exit records by worker."""

    def __init__(self, alive: dict, exits: dict | None = None):
        self._alive, self._exits = alive, exits or {}

    def alive(self, n):
        return self._alive

    def exits(self, n):
        return self._exits


def record(started_ago: float = 30.0) -> RunRecord:
    return RunRecord(run_id="pod-1", cluster="pod", provider="gcp", project="p", zone="z", bucket="gs://b",
                     model_dir="gs://b/m", num_train_steps=10, save_checkpoints_steps=5,
                     attempt={"n": 1, "workers": 4, "started_at": time.time() - started_ago})


def phase(alive: dict, exits: dict | None = None, started_ago: float = 30.0):
    ex = BucketExecutor(Beats(alive, exits), Arch.VM)
    return ex.poll(record(started_ago), 1)


def test_one_silent_host_loses_the_whole_attempt():
    now = time.time()
    fresh = {str(w): {"time": now} for w in range(4)}
    assert phase(fresh) == (JobPhase.RUNNING, None)
    # worker 3 stopped beating (its VM is gone) while the others look fine: the group restarts
    assert phase({**fresh, "3": {"time": now - ALIVE_STALE_S - 1}}) == (JobPhase.LOST, None)


def test_hosts_not_yet_started_are_waited_for_only_within_the_start_grace():
    now = time.time()
    two = {"0": {"time": now}, "1": {"time": now}}
    assert phase(two, started_ago=30) == (JobPhase.RUNNING, None)
    assert phase(two, started_ago=BucketExecutor.start_grace_s + 1) == (JobPhase.LOST, None)


def test_the_attempt_ends_when_every_host_has_exited():
    now = time.time()
    serving = {str(w): {"time": now} for w in range(1, 4)}
    # the job (worker 0) exited; the serving hosts have not yet noticed
    assert phase({"0": {"time": now - 100}, **serving}, {"0": {"code": 0}}) == (JobPhase.RUNNING, None)
    done = {str(w): {"code": 0} for w in range(4)}
    assert phase({"0": {"time": now - 100}, **serving}, done) == (JobPhase.EXITED, 0)
    # a failure of the job ends it at once, whatever the serving hosts say
    assert phase(serving, {"0": {"code": 42}}) == (JobPhase.EXITED, 42)


@pytest.mark.usefixtures("isolated_env")
def test_a_serving_worker_reports_until_the_job_workers_exit():
    store = RunStore(open_bucket("gs://tpuctl-local", Target(provider="local", project="local", zone=None)), "pod-1")
    command = {"workers": {"0": {"run": True, "env": {}}, "1": {"run": False, "env": {}}}}
    store.write_json(f"{store.attempt_prefix(1)}/exit-0.json", {"code": 0, "time": time.time()})
    assert serve_attempt(store, 1, "1", command) == 0
    assert store.alive(1)["1"]["serving"] is True
    assert store.exits(1)["1"]["code"] == 0


class Proc:
    def __init__(self, code: int | None):
        self.code = code

    def poll(self):
        return self.code


def test_an_emulated_host_whose_wrapper_died_without_an_exit_record_is_lost_at_once():
    """On the local provider the supervisor's own children are the hosts: one gone without an exit
    record (killed with its host) loses the attempt now, not when its heartbeat goes stale -- the
    other hosts would wait for it in an all-reduce."""
    from provision.runs.executors import LocalExecutor

    now = time.time()
    alive = {str(w): {"time": now} for w in range(4)}
    ex = LocalExecutor(provider=None, store=Beats(alive))
    ex.procs[1] = {str(w): Proc(None) for w in range(4)}
    rec = record()
    assert ex.poll(rec, 1) == (JobPhase.RUNNING, None)
    ex.procs[1]["2"] = Proc(-9)
    assert ex.poll(rec, 1) == (JobPhase.LOST, None)
    # a host that exited and said so is not lost: the others' exit records are still to come
    ex = LocalExecutor(provider=None, store=Beats(alive, {"2": {"code": 0}}))
    ex.procs[1] = {**{str(w): Proc(None) for w in range(4)}, "2": Proc(0)}
    assert ex.poll(rec, 1) == (JobPhase.RUNNING, None)


def test_restarting_the_group_stops_the_hosts_still_at_work_after_one_has_exited(tmp_path):
    """Worker 0 exited 42 (SIGTERMed, or its peer died) while worker 1 still beats: the attempt
    is decided (42), but worker 1 is blocked in an all-reduce with no peer and holds its TPU.
    Restarting the group must ask it to stop too (stop.json, which its agent turns into SIGTERM and
    then a kill), not only look at the exit code. Found as leftover `jobs run` processes of a
    slice's earlier attempts after `python -m tests.chaos slices`."""
    import threading

    from provision.cloud.storage import LocalBucket

    store = RunStore(LocalBucket(tmp_path), "pod-1")
    prefix = store.attempt_prefix(1)
    store.write_json(f"{prefix}/exit-0.json", {"code": 42, "time": time.time()})
    store.write_json(f"{prefix}/alive-1.json", {"time": time.time()})
    asked = threading.Event()

    def agent_of_worker_1():         # what serve/run_attempt do when they read stop.json
        while not asked.is_set():
            if store.read_json(f"{prefix}/stop.json") is not None:
                store.write_json(f"{prefix}/exit-1.json", {"code": 42, "time": time.time()})
                asked.set()
            time.sleep(0.05)

    threading.Thread(target=agent_of_worker_1, daemon=True).start()
    rec = record()
    rec.attempt["workers"] = 2
    ex = BucketExecutor(store, Arch.VM)
    assert ex.poll(rec, 1) == (JobPhase.EXITED, 42)
    started = time.time()
    ex.stop(rec, 1, grace=30)
    assert asked.wait(5), "worker 1 was never asked to stop"
    assert set(store.exits(1)) == {"0", "1"} and time.time() - started < 15
