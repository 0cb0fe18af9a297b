"""A sweep handed to a host VM (GCP --detach): what the host's agent starts, restarts and forgets."""

from __future__ import annotations

import json
import socket
import sys
import time

import pytest

from provision.cloud.storage import local_bucket
from provision.host import agent
from provision.host.controllers import Plan, Seen, decide
from provision.host.trust import HostPin
from provision.runs.pins import KEY, sha256, updated
from provision.sweeps.store import SweepRecord
from tests.integration.bootstrap_stub import Stub

SWEEP = "sweep-20260101-000000-abcd"
OTHER = "sweep-20260101-000000-beef"
JOB = b"job: bert-finetune\n"


def seen(sweep=SWEEP, live=True, held=False, here=False, started=None):
    return Seen(sweep_id=sweep, live=live, held_elsewhere=held, running_here=here, started_at=started)


def test_decide_starts_a_live_sweep_nobody_drives_and_forgets_an_ended_one():
    assert decide([seen()], now=100.0) == Plan(start=(SWEEP,))
    assert decide([seen(live=False)], now=100.0) == Plan(forget=(SWEEP,))
    assert decide([seen(live=False, here=True)], now=100.0) == Plan(forget=(SWEEP,))


def test_decide_leaves_alone_what_runs_here_or_elsewhere_or_cannot_be_read():
    assert decide([seen(here=True), seen(OTHER, held=True)], now=100.0) == Plan()
    assert decide([seen(live=None)], now=100.0) == Plan()


def test_decide_restarts_a_dead_controller_but_never_in_a_tight_loop():
    assert decide([seen(started=95.0)], now=100.0, restart_after_s=20.0) == Plan()
    assert decide([seen(started=70.0)], now=100.0, restart_after_s=20.0) == Plan(start=(SWEEP,))


class FakeProc:
    def __init__(self, argv, **_kw):
        self.argv, self.code = argv, None

    def poll(self):
        return self.code


@pytest.fixture
def host(monkeypatch):
    """A host agent over a local-directory bucket, its metadata server a loopback stub holding the
    pin (provision.runs.pins) that ``_sweep`` writes; the processes it would start are recorded."""
    bucket = local_bucket("host-sweeps")
    bucket.create("local")
    started: list[FakeProc] = []

    def popen(argv, **kw):
        started.append(FakeProc(argv, **kw))
        return started[-1]

    stub = Stub({}, {})
    monkeypatch.setenv("TPUCTL_METADATA_URL", f"{stub.url}/computeMetadata/v1")
    monkeypatch.setattr("provision.cloud.storage.open_bucket", lambda url, target: bucket)
    monkeypatch.setattr(agent.subprocess, "Popen", popen)
    bucket.stub = stub
    yield bucket, started
    stub.close()


def _sweep(bucket, sweep_id, state, lease=None, pin=True):
    """A sweep handed to host ``lab``, pinned there as `sweep --detach --host lab` pins it."""
    rec = SweepRecord(sweep_id=sweep_id, provider="gcp", project="proj-1", bucket="gs://host-sweeps",
                      zones=["us-central1-b"], accelerator_type="v2-8", preemptible=False, spot=False,
                      max_concurrent=1, max_trials=2, state=state,
                      # what SweepSpec.to_dict writes, as the records gate reads it (provision.basics.records)
                      spec={"metric": "eval_accuracy", "goal": "maximize", "method": "grid", "pruner": "none",
                            "parameters": {"learning_rate": [1e-5, 3e-5]}})
    bucket.write_bytes(f"tpuctl/sweeps/{sweep_id}/sweep.json", json.dumps(rec.to_dict()).encode())
    bucket.write_bytes(f"tpuctl/sweeps/{sweep_id}/job.yaml", JOB)
    if lease:
        bucket.write_bytes(f"tpuctl/sweeps/{sweep_id}/controller.json", json.dumps(lease).encode())
    bucket.write_bytes(f"tpuctl/clusters/lab/sweeps/{sweep_id}.json", json.dumps({"sweep": sweep_id}).encode())
    if pin:
        bucket.stub.attributes[KEY] = updated(bucket.stub.attributes.get(KEY), "sweep", sweep_id,
                                              {"job": sha256(JOB), "record": rec.digest(), "wheel": None})
    return rec


def test_agent_starts_the_controller_of_a_sweep_handed_to_its_host(host):
    bucket, started = host
    _sweep(bucket, SWEEP, "starting")
    agent.agent_loop("lab", "gs://host-sweeps", "proj-1", "lab", "host", once=True)
    assert [p.argv for p in started] == [[sys.executable, "-m", "provision", "sweep", "resume", SWEEP, "--where",
                                          "host", "--pinned-on", "lab", "--provider", "gcp", "--project", "proj-1",
                                          "--bucket", "gs://host-sweeps"]]


@pytest.mark.parametrize("change", ["not pinned", "record", "job"])
def test_a_sweep_request_from_the_bucket_alone_starts_no_controller(host, change, capsys):
    """A bucket writer can hand any sweep to the host, or change one handed over (its record says
    the pool's service account, zones and search space; its job spec what each trial runs): the
    controller, which stages and pins runs on the host's behalf, starts only as it was pinned."""
    bucket, started = host
    rec = _sweep(bucket, SWEEP, "starting", pin=change != "not pinned")
    if change == "record":
        rec.service_account = "owner@proj-1.iam.gserviceaccount.com"
        bucket.write_bytes(f"tpuctl/sweeps/{SWEEP}/sweep.json", json.dumps(rec.to_dict()).encode())
    elif change == "job":
        bucket.write_bytes(f"tpuctl/sweeps/{SWEEP}/job.yaml", b"job: bert-squad\n")
    for _ in range(2):
        agent.agent_loop("lab", "gs://host-sweeps", "proj-1", "lab", "host", once=True)
    assert started == []
    said = [line for line in capsys.readouterr().err.splitlines() if "refused sweep" in line]
    assert len(said) == 2       # once per pass here: each pass is a new agent; a running agent says it once
    expected = "is not pinned" if change == "not pinned" else f"the {change} of sweep {SWEEP} in the bucket"
    assert expected in said[0]


def test_a_worker_agent_runs_no_controller(host):
    bucket, started = host
    _sweep(bucket, SWEEP, "running")
    agent.agent_loop("lab", "gs://host-sweeps", "proj-1", "0", "worker", once=True)
    assert started == []


def test_ids_from_the_bucket_are_checked_before_they_reach_argv(host):
    bucket, started = host
    bucket.write_bytes(f"tpuctl/sweeps/{SWEEP}/sweep.json", json.dumps({"state": "running"}).encode())
    for name in ("sweep-x;rm -rf.json", "sweep-20260101-000000-ABCD.json", f"nested/{SWEEP}.json", SWEEP,
                 f"{SWEEP}.txt", "--help.json"):
        bucket.write_bytes(f"tpuctl/clusters/lab/sweeps/{name}", b"{}")
    agent.agent_loop("lab", "gs://host-sweeps", "proj-1", "lab", "host", once=True)
    assert started == []


def test_ended_sweeps_are_forgotten_and_held_ones_left_alone(host):
    bucket, started = host
    _sweep(bucket, SWEEP, "finished")
    _sweep(bucket, OTHER, "running", lease={"owner": "x", "host": "a-laptop", "pid": 1, "heartbeat_at": time.time()})
    agent.agent_loop("lab", "gs://host-sweeps", "proj-1", "lab", "host", once=True)
    assert started == []
    assert bucket.stat(f"tpuctl/clusters/lab/sweeps/{SWEEP}.json") is None
    assert bucket.stat(f"tpuctl/clusters/lab/sweeps/{OTHER}.json") is not None


def test_a_dead_controller_is_restarted_while_its_sweep_is_live(host):
    bucket, started = host
    # its lease still looks fresh, but it was this host's process and that process is gone
    _sweep(bucket, SWEEP, "running", lease={"owner": "x", "host": socket.gethostname(), "pid": 2 ** 22 + 7,
                                            "heartbeat_at": time.time()})
    controllers: dict = {}
    trust = HostPin("gcp", "lab")
    agent.watch_sweeps(bucket, "lab", "proj-1", "gs://host-sweeps", controllers, now=1000.0, trust=trust)
    assert len(started) == 1
    agent.watch_sweeps(bucket, "lab", "proj-1", "gs://host-sweeps", controllers, now=1001.0, trust=trust)
    assert len(started) == 1                       # still running: not started twice
    started[0].code = -9                           # killed
    agent.watch_sweeps(bucket, "lab", "proj-1", "gs://host-sweeps", controllers, now=1002.0, trust=trust)
    assert len(started) == 1                       # not in a tight loop
    agent.watch_sweeps(bucket, "lab", "proj-1", "gs://host-sweeps", controllers, now=1100.0, trust=trust)
    assert len(started) == 2 and started[1].argv[4:6] == ["resume", SWEEP]
    _sweep(bucket, SWEEP, "finished")
    started[1].code = 0
    agent.watch_sweeps(bucket, "lab", "proj-1", "gs://host-sweeps", controllers, now=1200.0, trust=trust)
    assert len(started) == 2 and controllers == {}
    assert bucket.stat(f"tpuctl/clusters/lab/sweeps/{SWEEP}.json") is None
