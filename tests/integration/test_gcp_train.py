"""`tpuctl train` on the GCP provider, over the wire: the fake cloud, fake-gcs-server, and the host agent.

The host agent (`python -m provision.host.agent daemon`) runs here as a local process, standing in for
the host VM's agent started by its startup script; it pulls its work from the bucket exactly as
on a real host. The job trains a tiny BERT on this machine's CPU (TPUCTL_DEVICE=cpu: the stand-in
host has no TPU); its model_dir is a local path (--allow-local-paths) because TensorFlow's own
gs:// client cannot be pointed at fake-gcs-server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_tpuctl_process

pytestmark = [pytest.mark.tf, pytest.mark.xdist_group("tf")]

# long enough that the job is still running when the supervisor's stop request reaches it
STEPS = 800


@pytest.fixture
def cloud(fakegcp_env, gcs_env, monkeypatch):
    monkeypatch.setenv("TPUCTL_DEVICE", "cpu")
    bucket = gcs_env.create_bucket()
    fakegcp_env.allow_tpu_nodes()     # these runs use TPU Nodes: a project that kept Node access
    return fakegcp_env, f"gs://{bucket}"


@pytest.fixture
def host_agent(cloud):
    procs = []

    def start(cluster: str, zone: str = "us-central1-b") -> subprocess.Popen:
        fake, bucket = cloud
        # the host VM's own metadata server: the run must be pinned there (provision.runs.pins)
        env = {**os.environ, "TPUCTL_METADATA_URL": fake.metadata_url(zone, cluster)}
        proc = subprocess.Popen([sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", cluster, "--bucket",
                                 bucket, "--project", "tpuctl-test", "--role", "host", "--worker", "host0",
                                 "--poll", "0.5"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _train(tiny: Path, model_dir: Path, bucket: str, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "provision", "train", "lab", "--job", "templates/bert-pretrain-tiny.yaml",
            "--set", f"bert_dir={tiny}", "--set", f"corpus_files={tiny}/corpus.txt", "--set", f"model_dir={model_dir}",
            "--set", f"num_train_steps={STEPS}", "--set", "save_checkpoints_steps=50", "--set", "steps_per_execution=10",
            "--allow-local-paths", "--bucket", bucket, "--poll", "1", "--on-interrupt", "stop", "--json", *extra]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _progress(model_dir: Path) -> dict:
    try:
        return json.loads((model_dir / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.long
def test_preempted_tpu_is_recreated_with_its_range_in_the_next_zone_and_the_run_resumes(
        cloud, host_agent, tiny_bert, tmp_path):
    fake, bucket = cloud
    up = run_tpuctl_process("up", "lab", "--zone", "us-central1-b,us-central1-c", "--arch", "node", "--preemptible",
                            "--json")
    assert up.code == 0, up.err
    cidr = up.json()["cidr"]
    host_agent("lab")
    model_dir = tmp_path / "model"
    proc = _train(tiny_bert, model_dir, bucket)
    deadline = time.time() + 300
    preempted = False
    while proc.poll() is None and time.time() < deadline:
        time.sleep(0.3)
        p = _progress(model_dir)
        if not preempted and p.get("status") == "running" and (p.get("step") or 0) >= 100:
            fake.stockout("us-central1-b", count=1)      # the recreation meets a stockout in its old zone
            fake.preempt("us-central1-b", "lab")
            preempted = True
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert preempted
    run = json.loads(out)["run"]
    assert run["status"] == "finished" and run["last_progress"]["step"] == STEPS and run["preemptions"] == 1
    assert run["zone"] == "us-central1-c"
    # the TPU came back in the next zone with the same range; the host stayed in its region
    st = run_tpuctl_process("status", "--json").json()["clusters"][0]
    assert st["tpu"]["zone"] == "us-central1-c" and st["tpu"]["cidr_block"] == cidr and st["tpu"]["state"] == "READY"
    # the events live in the bucket, next to the run
    events = run_tpuctl_process("logs", run["run_id"], "--events")
    assert "preempted" in events.out and "recreated" in events.out and "zone=us-central1-c" in events.out
    assert f"cidr={cidr}" in events.out and "resumed" in events.out, events.out
    log = run_tpuctl_process("logs", run["run_id"])
    assert "attempt 2 of run" in log.out and "resumed from" in log.out


@pytest.mark.long
def test_a_run_that_crashes_the_same_way_every_time_stops_at_its_second_attempt(cloud, host_agent, tiny_bert,
                                                                                tmp_path):
    """The same error line twice before the first step stops the run then, within --max-failures:
    a checkpoint that cannot be restored fails every attempt, each billing the TPU."""
    fake, bucket = cloud
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bert, broken)
    data = next(broken.glob("bert_model.ckpt.data-*"))
    data.write_bytes(data.read_bytes()[:64])
    assert run_tpuctl_process("up", "lab", "--zone", "us-central1-b", "--arch", "node").code == 0
    host_agent("lab")
    proc = _train(broken, tmp_path / "model", bucket, "--max-failures", "2")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-2000:]
    run = json.loads(out)["run"]
    assert run["status"] == "gave_up" and run["failures"] == 2 and run["attempts"] == 2
    assert run["reason"].startswith("the job failed twice in a row before its first progress, with the same error: ")
    assert fake.call_counts().get("tpu.v1.nodes.create") == 1    # job errors never recreate the TPU


def test_hosts_created_without_a_bucket_learn_it_from_their_metadata(cloud, tiny_bert, tmp_path):
    fake, bucket = cloud
    assert run_tpuctl_process("up", "lab", "--zone", "us-central1-b", "--arch", "vm").code == 0
    r = run_tpuctl_process("train", "lab", "--job", "templates/bert-finetune-tiny.yaml", "--set", f"bert_dir={tiny_bert}",
                           "--set", f"train_file={tiny_bert}/train.tsv", "--set", f"model_dir={tmp_path}/m",
                           "--allow-local-paths", "--bucket", bucket, "--detach", "--json")
    assert r.code == 0, r.err
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1, tpu_v2

    opts = {"api_endpoint": fake.url}
    vm = compute_v1.InstancesClient(credentials=AnonymousCredentials(), client_options=opts).get(
        project="tpuctl-test", zone="us-central1-b", instance="lab")
    assert {i.key: i.value for i in vm.metadata.items}["tpuctl-bucket"] == bucket
    node = tpu_v2.TpuClient(credentials=AnonymousCredentials(), transport="rest", client_options=opts).get_node(
        name="projects/tpuctl-test/locations/us-central1-b/nodes/lab")
    assert node.metadata["tpuctl-bucket"] == bucket
    # the detached run waits for the host VM's agent to take it over
    store = json.loads(subprocess.run([sys.executable, "-c", (
        "import json,sys\nfrom google.cloud import storage\nfrom google.auth.credentials import AnonymousCredentials\n"
        f"c=storage.Client(project='tpuctl-test', credentials=AnonymousCredentials(), client_options={{'api_endpoint': '{os.environ['STORAGE_EMULATOR_HOST']}'}})\n"
        f"print(c.bucket('{bucket[5:]}').blob('tpuctl/clusters/lab/current.json').download_as_text())")],
        capture_output=True, text=True, check=True).stdout)
    assert store["supervise_on_host"] == r.json()["run_id"]


def _put_object(bucket: str, name: str, data: dict) -> None:
    """Write an object as a host would (google-cloud-storage against fake-gcs-server)."""
    subprocess.run([sys.executable, "-c", (
        "import sys\nfrom google.cloud import storage\nfrom google.auth.credentials import AnonymousCredentials\n"
        f"c=storage.Client(project='tpuctl-test', credentials=AnonymousCredentials(), client_options={{'api_endpoint': '{os.environ['STORAGE_EMULATOR_HOST']}'}})\n"
        f"c.bucket('{bucket[5:]}').blob('{name}').upload_from_string(sys.stdin.read())")],
        input=json.dumps(data), text=True, check=True)


def test_a_failed_host_bootstrap_stops_the_run_at_once_and_status_says_why(cloud, tiny_bert, tmp_path):
    """A TPU VM worker whose startup script gave up (here: pip could not install the wheel) will never
    start the job: `train` stops with the host's own words instead of waiting out the 15-minute start
    grace on a billed TPU, and `status` shows the failure. The object is the one templates/host-startup.sh
    writes (docs/reliability.md#host-bootstrap; tests/integration/test_startup_script.py runs the script)."""
    _fake, bucket = cloud
    assert run_tpuctl_process("up", "lab", "--zone", "us-central1-b", "--arch", "vm", "--no-vm").code == 0
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _put_object(bucket, "tpuctl/clusters/lab/bootstrap/worker-0.json", {
        "version": 1, "cluster": "lab", "role": "worker", "worker": "0", "host": "t1v-n-lab-w-0", "state": "failed",
        "step": "pip", "message": "pip install tpuctl-0.1.0-py3-none-any.whl failed 3 times", "started": now,
        "time": now, "run_id": None, "wheel_object": None,
        "log_tail": ["ERROR: No matching distribution found for tenacity>=8.2.0"]})
    started = time.time()
    r = run_tpuctl_process("train", "lab", "--job", "templates/bert-finetune-tiny.yaml", "--set", f"bert_dir={tiny_bert}",
                           "--set", f"train_file={tiny_bert}/train.tsv", "--set", f"model_dir={tmp_path}/m",
                           "--allow-local-paths", "--bucket", bucket, "--poll", "1", "--json", timeout=240)
    assert r.code == 1, r.err[-2000:]
    assert time.time() - started < 120
    run = r.json()["run"]
    assert run["status"] == "gave_up" and run["attempts"] == 1
    assert "host bootstrap failed: worker-0 at pip: pip install tpuctl-0.1.0-py3-none-any.whl failed 3 times" \
        in run["reason"]
    assert "host bootstrap failed: worker-0 at pip" in r.err
    st = run_tpuctl_process("status", "lab")
    assert st.code == 0, st.err
    assert "lab: host bootstrap failed: worker-0 at pip" in st.out and "No matching distribution" in st.out
    doc = run_tpuctl_process("status", "lab", "--json").json()["clusters"][0]["run"]
    assert doc["bootstrap_failed"][0]["step"] == "pip"
    assert run_tpuctl_process("down", "lab").code == 0


def _read_object(bucket: str, name: str) -> dict:
    """Read an object as a host would (google-cloud-storage against fake-gcs-server)."""
    return json.loads(subprocess.run([sys.executable, "-c", (
        "from google.cloud import storage\nfrom google.auth.credentials import AnonymousCredentials\n"
        f"c=storage.Client(project='tpuctl-test', credentials=AnonymousCredentials(), client_options={{'api_endpoint': '{os.environ['STORAGE_EMULATOR_HOST']}'}})\n"
        f"print(c.bucket('{bucket[5:]}').blob('{name}').download_as_text())")],
        capture_output=True, text=True, check=True).stdout)


@pytest.mark.long
def test_a_pod_slice_runs_one_client_on_worker_0_while_the_other_workers_report(cloud, tiny_bert, tmp_path):
    """A v4-16 TPU VM slice (2 hosts): the attempt runs the job on worker 0 with TPU_LOAD_LIBRARY=0
    (as Google runs TensorFlow on pod slices; tests/unit/test_launch.py cites it) and TPU_NAME listing
    both workers' gRPC addresses from the node's networkEndpoints (no Cloud TPU API call to resolve
    them: tests/jobs/test_pod_resolver.py); worker 1's agent runs no job but reports until the job has
    exited, and the run finishes when both have. The stand-in workers are agent daemons here (role worker, as a TPU VM's startup script
    starts them); the job trains on this CPU (TPUCTL_DEVICE=cpu)."""
    _fake, bucket = cloud
    up = run_tpuctl_process("up", "pod", "--zone", "us-central2-b", "--accelerator-type", "v4-16", "--no-vm", "--json")
    assert up.code == 0, up.err
    agents = [subprocess.Popen([sys.executable, "-m", "provision.host.agent", "daemon", "--cluster", "pod", "--bucket",
                                bucket, "--project", "tpuctl-test", "--role", "worker", "--worker", str(w),
                                "--poll", "0.5"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "TPUCTL_METADATA_URL": _fake.metadata_url("us-central2-b", "pod",
                                                                                           worker=w)})
              for w in (0, 1)]
    try:
        r = run_tpuctl_process("train", "pod", "--job", "templates/bert-finetune-tiny.yaml",
                               "--set", f"bert_dir={tiny_bert}", "--set", f"train_file={tiny_bert}/train.tsv",
                               "--set", f"model_dir={tmp_path}/m", "--set", "num_train_steps=20",
                               "--allow-local-paths", "--bucket", bucket, "--poll", "1", "--json", timeout=300)
    finally:
        for a in agents:
            a.kill()
            a.wait()
    assert r.code == 0, r.err[-3000:]
    run = r.json()["run"]
    assert run["status"] == "finished" and run["attempts"] == 1 and run["attempt"]["workers"] == 2
    prefix = f"tpuctl/runs/{run['run_id']}/attempts/1"
    command = _read_object(bucket, f"{prefix}/command.json")
    client = command["workers"]["0"]
    node = next(n for n in _fake.resources()["nodes"] if n["name"].endswith("/nodes/pod"))
    workers = ",".join(f"grpc://{e['ipAddress']}:{e['port']}" for e in node["networkEndpoints"])
    assert len(node["networkEndpoints"]) == 2
    assert client["run"] is True and client["env"]["TPU_NAME"] == workers and client["env"]["TPU_LOAD_LIBRARY"] == "0"
    assert client["env"]["TPUCTL_TPU_ZONE"] == "us-central2-b" and client["env"]["TPUCTL_SLICE_CORES"] == "16"
    assert command["workers"]["1"] == {"run": False, "env": {}}
    assert _read_object(bucket, f"{prefix}/exit-0.json")["code"] == 0
    served = _read_object(bucket, f"{prefix}/exit-1.json")
    assert served["code"] == 0 and served["served"] is True
    assert _read_object(bucket, f"{prefix}/alive-1.json")["serving"] is True
    log = run_tpuctl_process("logs", run["run_id"], "--worker", "0")
    assert "(worker 0)" in log.out and "finished at step 20" in log.out
