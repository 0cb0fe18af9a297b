"""`tpuctl sweep --detach --host` on the GCP provider, over the wire: the fake cloud and fake-gcs-server.

No training here: the sweep is written to the bucket and handed to the host VM's agent, which is
run once in this process with its process starts recorded (what it would run on the host VM).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from provision.basics.config import Target
from provision.cloud.storage import open_bucket
from tests.conftest import REPO, run_tpuctl_process

PROJECT = "tpuctl-test"


@pytest.fixture
def cloud(fakegcp_env, gcs_env, gcs_bucket):
    return fakegcp_env, f"gs://{gcs_bucket}"


def _spec(tmp_path: Path, bucket: str) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"""job: {REPO / 'templates' / 'bert-finetune-tiny.yaml'}
set: {{bert_dir: {bucket}/tiny, train_file: {bucket}/tiny/train.tsv, dev_file: {bucket}/tiny/dev.tsv}}
metric: eval_accuracy
parameters:
  learning_rate: {{values: [3.0e-4, 1.0e-3]}}
""")
    return str(path)


def test_detached_sweep_is_handed_to_the_host_vm_and_read_back_from_the_bucket(cloud, tmp_path, monkeypatch):
    fake, bucket = cloud
    spec = _spec(tmp_path, bucket)
    # no --host, or a host that does not exist: one line, exit 2, nothing written
    r = run_tpuctl_process("sweep", spec, "--provider", "gcp", "--zone", "us-central1-b", "--bucket", bucket, "--detach", "--json")
    assert r.code == 2 and "--host CLUSTER" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    r = run_tpuctl_process("sweep", spec, "--provider", "gcp", "--zone", "us-central1-b", "--bucket", bucket, "--detach", "--host", "nohost")
    assert r.code == 2 and "no cluster named nohost" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    b = open_bucket(bucket, Target(provider="gcp", project=PROJECT, zone=None))
    assert list(b.list("tpuctl/sweeps/")) == []

    assert run_tpuctl_process("up", "hostc", "--zone", "us-central1-b").code == 0
    began = time.time()
    r = run_tpuctl_process("sweep", spec, "--provider", "gcp", "--zone", "us-central1-b", "--bucket", bucket, "--detach", "--host", "hostc",
                           "--json")
    assert r.code == 0, r.err
    doc = r.json()
    sweep = doc["sweep"]
    assert doc["detached"] is True and time.time() - began < 60
    assert "Compute Engine default service account" in r.err     # the pool has no --service-account
    assert fake.call_counts().get("tpu.v2.nodes.create", 0) == 1     # only hostc's: the pool is the controller's
    # the host's agent finds its work: the request, its bucket in the VM's metadata, a tpuctl to install
    assert json.loads(b.read_bytes(f"tpuctl/clusters/hostc/sweeps/{sweep}.json"))["sweep"] == sweep
    wheel = json.loads(b.read_bytes("tpuctl/clusters/hostc/agent.json"))["wheel_object"]
    assert wheel.startswith(f"tpuctl/sweeps/{sweep}/tpuctl/tpuctl-") and b.stat(wheel) is not None
    from provision.cloud.gcp import GcpProvider

    meta = GcpProvider(PROJECT).metadata_of("vm", "us-central1-b", "hostc")
    assert meta["tpuctl-bucket"] == bucket
    # and what it may run there: this sweep, as it is in the bucket now, and the wheel staged for it
    from provision.runs.pins import Pin
    from provision.sweeps.store import SweepStore

    pinned = Pin.parse(meta["tpuctl-pin"]).entry("sweep", sweep)
    assert pinned["record"] == SweepStore(b, sweep).load().digest() and pinned["wheel"]

    # any machine reads it from the bucket
    st = run_tpuctl_process("sweep", "status", sweep, "--provider", "gcp", "--bucket", bucket, "--json",
                            env={"TPUCTL_HOME": str(tmp_path / "elsewhere")})
    assert st.code == 0, st.err
    got = st.json()
    assert got["sweep"] == sweep and got["state"] == "running" and got["metric"] == "eval_accuracy"
    assert got["host"] == "hostc" and "waiting for host VM hostc's agent" in got["reason"]
    assert [t["trial"] for t in got["trials"]] == []

    # a sweep whose controller is gone can be handed to a host again from any machine
    b.delete(f"tpuctl/clusters/hostc/sweeps/{sweep}.json")
    r = run_tpuctl_process("sweep", "resume", sweep, "--provider", "gcp", "--bucket", bucket, "--detach", "--host",
                           "hostc", "--json", env={"TPUCTL_HOME": str(tmp_path / "elsewhere")})
    assert r.code == 0 and r.json()["sweep"] == sweep, r.err
    assert b.stat(f"tpuctl/clusters/hostc/sweeps/{sweep}.json") is not None

    # the host VM's agent starts the controller for it (subprocess.Popen recorded: last, it is global)
    from provision.host import agent

    started = []
    popen = agent.subprocess.Popen
    monkeypatch.setenv("TPUCTL_METADATA_URL", fake.metadata_url("us-central1-b", "hostc"))
    monkeypatch.setattr(agent.subprocess, "Popen", lambda argv, **kw: started.append(argv))
    agent.agent_loop("hostc", bucket, PROJECT, "hostc", "host", once=True)
    assert started == [[sys.executable, "-m", "provision", "sweep", "resume", sweep, "--where", "host",
                        "--pinned-on", "hostc", "--provider", "gcp", "--project", PROJECT, "--bucket", bucket]]
    monkeypatch.setattr(agent.subprocess, "Popen", popen)

    # a bucket writer who changes the sweep after the hand-over (the pool's service account) gets
    # nothing from the controller the agent starts: it drives only the sweep as pinned on the host
    rec = json.loads(b.read_bytes(f"tpuctl/sweeps/{sweep}/sweep.json"))
    b.write_bytes(f"tpuctl/sweeps/{sweep}/sweep.json",
                  json.dumps({**rec, "service_account": "owner@tpuctl-test.iam.gserviceaccount.com"}).encode())
    r = run_tpuctl_process("sweep", "resume", sweep, "--where", "host", "--pinned-on", "hostc", "--provider", "gcp",
                           "--project", PROJECT, "--bucket", bucket,
                           env={"TPUCTL_METADATA_URL": fake.metadata_url("us-central1-b", "hostc")})
    assert r.code == 2 and f"the record of sweep {sweep} in the bucket" in r.err, r.err
    assert fake.call_counts().get("tpu.v2.nodes.create", 0) == 1     # still only hostc's


SA = "tpuctl-runs@tpuctl-test.iam.gserviceaccount.com"


def test_sweep_pool_tpus_run_as_the_service_account_given(cloud, tmp_path):
    """`sweep --service-account`: checked as `up` checks it, before anything is written; the pool's
    TPU VMs are created with it (the create body's serviceAccount, as the fake cloud stored it)."""
    fake, bucket = cloud
    spec = _spec(tmp_path, bucket)
    b = open_bucket(bucket, Target(provider="gcp", project=PROJECT, zone=None))
    for bad in ("evil; rm -rf /", "user@gmail.com"):
        r = run_tpuctl_process("sweep", spec, "--provider", "gcp", "--zone", "us-central1-b", "--bucket", bucket,
                               "--service-account", bad)
        assert r.code == 2 and "invalid service account" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert list(b.list("tpuctl/sweeps/")) == [] and fake.call_counts().get("tpu.v2.nodes.create", 0) == 0

    assert run_tpuctl_process("up", "hostc", "--zone", "us-central1-b", "--service-account", SA).code == 0
    r = run_tpuctl_process("sweep", spec, "--provider", "gcp", "--zone", "us-central1-b", "--bucket", bucket,
                           "--detach", "--host", "hostc", "--service-account", SA, "--json")
    assert r.code == 0, r.err
    assert "default service account" not in r.err
    sweep = r.json()["sweep"]
    from provision.cloud.gcp import GcpProvider
    from provision.cluster import up
    from provision.sweeps.controller import pool_spec
    from provision.sweeps.pool import cluster_name
    from provision.sweeps.store import SweepStore

    rec = SweepStore(b, sweep).load()
    assert rec.service_account == SA
    # without --service-account the pool takes the host's own account, which the host may attach
    r = run_tpuctl_process("sweep", spec, "--provider", "gcp", "--zone", "us-central1-b", "--bucket", bucket,
                           "--detach", "--host", "hostc", "--json")
    assert r.code == 0 and "default service account" not in r.err and f"host hostc's service account {SA}" in r.err
    assert SweepStore(b, r.json()["sweep"]).load().service_account == SA
    # what the controller on the host does to grow its pool
    up(GcpProvider(PROJECT), pool_spec(rec, cluster_name(sweep, 1)))
    pool = [n for n in fake.resources()["nodes"] if n["name"].endswith(cluster_name(sweep, 1))]
    assert len(pool) == 1 and pool[0]["serviceAccount"]["email"] == SA, pool
