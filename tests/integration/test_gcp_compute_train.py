"""Training on Compute Engine TPUs over the wire: the fake cloud, fake-gcs-server, host agents.

As in test_gcp_train.py, each TPU VM worker's agent (``python -m provision.host.agent daemon
--role worker --worker N``) runs here as a local process standing in for the VM, and the job
trains a tiny BERT on this CPU (TPUCTL_DEVICE=cpu). Each agent reads its VM's metadata server
through the fake (``TPUCTL_METADATA_URL``: the fake serves every instance's guest view), so a
Spot preemption reaches the job first as the guest's notice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_tpuctl_process

pytestmark = [pytest.mark.tf, pytest.mark.xdist_group("tf")]

ZONE = "us-east5-c"          # ct5p-hightpu-4t on Compute Engine (tests/fakegcp/catalog.py)
STEPS = 300


@pytest.fixture
def cloud(fakegcp_env, gcs_env, monkeypatch):
    monkeypatch.setenv("TPUCTL_DEVICE", "cpu")
    bucket = gcs_env.create_bucket()
    return fakegcp_env, f"gs://{bucket}"


@pytest.fixture
def workers(cloud):
    procs: list[subprocess.Popen] = []

    def start(cluster: str, count: int) -> None:
        fake, bucket = cloud
        for w in range(count):
            env = {**os.environ, "TPUCTL_METADATA_URL": fake.guest_metadata_url(ZONE, f"{cluster}-tpu-{w}")}
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", cluster, "--bucket", bucket,
                 "--project", "tpuctl-test", "--role", "worker", "--worker", str(w), "--poll", "0.5"],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _train(tiny: Path, model_dir: Path, bucket: str, cluster: str, steps: int) -> subprocess.Popen:
    args = [sys.executable, "-m", "provision", "train", cluster, "--job", "templates/bert-pretrain-tiny.yaml",
            "--set", f"bert_dir={tiny}", "--set", f"corpus_files={tiny}/corpus.txt", "--set", f"model_dir={model_dir}",
            "--set", f"num_train_steps={steps}", "--set", "save_checkpoints_steps=50", "--set", "steps_per_execution=10",
            "--allow-local-paths", "--bucket", bucket, "--poll", "0.5", "--on-interrupt", "stop", "--json"]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _progress(model_dir: Path) -> dict:
    try:
        return json.loads((model_dir / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.long
def test_a_preempted_spot_slice_is_recreated_whole_and_the_run_resumes(cloud, workers, tiny_bert, tmp_path):
    fake, bucket = cloud
    up = run_tpuctl_process("up", "ce", "--zone", ZONE, "-a", "v5p-16", "--spot", "--no-vm", "--json")
    assert up.code == 0, up.err
    assert up.json()["tpu"]["api"] == "compute" and up.json()["tpu"]["hosts"] == 2
    workers("ce", 2)
    model_dir = tmp_path / "model"
    proc = _train(tiny_bert, model_dir, bucket, "ce", STEPS)
    preempted_at = resumed_at = None
    deadline = time.time() + 400
    while proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
        p = _progress(model_dir)
        if preempted_at is None and p.get("status") == "running" and (p.get("step") or 0) >= 100:
            # Compute Engine preempts worker 0 (the job's): its guest is told, 2 s later it is deleted
            fake.preempt_instance(ZONE, "ce-tpu-0", notice=2.0)
            preempted_at = time.time()
        if preempted_at and resumed_at is None and (p.get("started_at") or 0) > preempted_at and p.get("step"):
            resumed_at = time.time()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    run = json.loads(out)["run"]
    assert run["status"] == "finished" and run["last_progress"]["step"] == STEPS and run["preemptions"] == 1
    # the slice came back whole: a second workload policy, template, MIG and one BULK create of both workers
    counts = fake.call_counts()
    assert counts["compute.instanceGroupManagers.insert"] == 2 and counts["compute.instanceTemplates.insert"] == 2
    assert counts["compute.instanceGroupManagers.createInstances"] == 2
    assert counts["compute.instanceGroupManagers.delete"] == 1
    st = run_tpuctl_process("status", "ce", "--json").json()["clusters"][0]
    assert st["tpu"]["state"] == "READY" and st["tpu"]["api"] == "compute" and len(st["tpu"]["endpoints"]) == 2
    # the job heard the guest's notice and checkpointed: it resumed from a checkpoint, not from step 0
    log = run_tpuctl_process("logs", run["run_id"], "--worker", "0")
    assert "preemption notice from the metadata server: SIGTERM to the job" in log.out
    assert "resumed from" in log.out
    events = run_tpuctl_process("logs", run["run_id"], "--events").out
    assert "preempted" in events and "recreated" in events
    assert resumed_at is not None
    print(f"recovery on the fake (preemption to the first step of the resumed attempt): "
          f"{resumed_at - preempted_at:.1f} s")
    assert run_tpuctl_process("down", "ce").code == 0
    assert not any(fake.resources()[k] for k in ("instances", "instanceGroupManagers", "instanceTemplates",
                                                 "resourcePolicies"))


@pytest.mark.long    # ~30 s of TensorFlow for training any TPU does; the flex-start path itself is covered
                     # without TF by test_gcp_compute_tpu.py, so make test stays within its 15 minutes
def test_the_capacity_order_lands_on_flex_start_waits_for_it_and_trains(cloud, workers, tiny_bert, tmp_path):
    fake, bucket = cloud
    fake.set_latencies(queued_provisioning=1.0)        # the resize request waits in ACCEPTED a while
    fake.stockout(ZONE, kind="compute-tpu", model="SPOT")
    up = run_tpuctl_process("up", "fx", "--zone", ZONE, "-a", "v5p-8", "--no-vm", "--capacity",
                            "spot,flex-start,on-demand", "--flex-start", "2h", "--json")
    assert up.code == 0, up.err
    doc = up.json()
    assert doc["tpu"]["capacity"] == "flex-start" and "waiting" not in doc["tpu"]["state"].lower()
    assert any(n.startswith("chose v5p-8 in us-east5-c (flex-start)") for n in doc["notes"]), doc["notes"]
    # it waited for it: the request read while ACCEPTED, the MIG read again until its worker came (a
    # slice whose workers are all there costs no resizeRequests.get, so that read is not repeated)
    counts = fake.call_counts()
    assert counts["compute.instanceGroupManagerResizeRequests.get"] >= 1, counts
    assert counts["compute.instanceGroupManagers.get"] >= 2, counts
    workers("fx", 1)
    proc = _train(tiny_bert, tmp_path / "model", bucket, "fx", 30)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["run"]["status"] == "finished"
    assert run_tpuctl_process("down", "fx").code == 0
    assert not fake.resources()["instanceGroupManagers"] and not fake.resources()["instances"]
