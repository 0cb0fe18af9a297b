"""Write access to a cluster's bucket is not code execution on its hosts (docs/security.md).

Over the wire: the fake cloud (Compute, Cloud TPU, and each machine's metadata server view) and
fake-gcs-server. The attacker holds only object writes on the bucket (google-cloud-storage, as
``roles/storage.objectUser`` allows); the host agents run here as stand-ins for the host VM and
the TPU VM's worker 0, each reading its own metadata (``TPUCTL_METADATA_URL``), as on a real host.
Before the pin, each of these object writes ran code as the agent's user (root on a host).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import ClassVar

import pytest

from provision.host import agent
from provision.staging import workdir
from provision.staging.selection import select
from tests.conftest import run_tpuctl_process

PROJECT = "tpuctl-test"
ZONE = "us-central1-b"
EVIL = "lab-20990101-000000-dead"
MARK = "open({path!r}, 'w').write('ran'); import os; os._exit(0)\n"


@pytest.fixture
def cloud(fakegcp_env, gcs_env, gcs_client):
    """Cluster ``lab`` (a host VM and a v2-8 TPU VM) with its bucket, and the attacker's writer."""
    name = gcs_env.create_bucket()
    up = run_tpuctl_process("up", "lab", "--zone", ZONE, "--bucket", f"gs://{name}", "--json")
    assert up.code == 0, up.err
    bucket = gcs_client.bucket(name)

    def put(obj: str, data: bytes | str | dict) -> None:
        bucket.blob(obj).upload_from_string(json.dumps(data) if isinstance(data, dict) else data)

    def get(obj: str) -> dict | None:
        blob = bucket.blob(obj)
        return json.loads(blob.download_as_bytes()) if blob.exists() else None

    return fakegcp_env, f"gs://{name}", put, get


class Recorded:
    """subprocess.Popen while an agent pass runs: what it would start, recorded instead of run."""

    argvs: ClassVar[list[list[str]]] = []

    def __init__(self, argv, **_kw):
        self.argvs.append(list(argv))

    def poll(self):
        return None


def agent_pass(fake, bucket: str, role: str, monkeypatch, *, record: bool = False) -> None:
    """One pass of the agent of the host VM (role host) or of the TPU VM's worker 0 (role worker)."""
    url = fake.metadata_url(ZONE, "lab") if role == "host" else fake.metadata_url(ZONE, "lab", worker=0)
    monkeypatch.setenv("TPUCTL_METADATA_URL", url)
    with pytest.MonkeyPatch.context() as mp:
        if record:
            mp.setattr(agent.subprocess, "Popen", Recorded)
        agent.agent_loop("lab", bucket, PROJECT, "lab" if role == "host" else "0", role, once=True)


def test_object_writes_alone_start_nothing_on_the_host_vm_or_the_tpu_vm(cloud, tmp_path, monkeypatch):
    fake, bucket, put, get = cloud
    marker = tmp_path / "pwned"
    # what an objectUser of the bucket can write: a run of their own, named as current
    put(f"tpuctl/runs/{EVIL}/spec.yaml", "job: bert-finetune\n")
    put(f"tpuctl/runs/{EVIL}/code/jobs/__init__.py", MARK.format(path=str(marker)))
    put(f"tpuctl/runs/{EVIL}/attempts/1/command.json", {"code": True, "env": {"TPUCTL_DEVICE": "cpu"}})
    put(f"tpuctl/runs/{EVIL}/run.json", {"run_id": EVIL, "cluster": "lab", "provider": "gcp", "project": PROJECT,
                                         "zone": ZONE, "bucket": bucket, "model_dir": f"{bucket}/m",
                                         "num_train_steps": 10, "save_checkpoints_steps": 5, "job": "bert-finetune"})
    put("tpuctl/clusters/lab/current.json", {"run_id": EVIL, "attempt": 1, "runs_on": "workers",
                                             "supervise_on_host": EVIL})

    Recorded.argvs = []
    agent_pass(fake, bucket, "worker", monkeypatch, record=True)
    agent_pass(fake, bucket, "host", monkeypatch, record=True)
    assert Recorded.argvs == [], "an agent started what the bucket alone asked for"
    ended = get(f"tpuctl/runs/{EVIL}/attempts/1/exit-0.json")
    assert ended["code"] == 2 and f"run {EVIL} is not pinned in this host's metadata (tpuctl-pin)" in ended["refused"]

    # and the host's supervisor, were it started by hand with what the bucket says, refuses too
    monkeypatch.setenv("TPUCTL_METADATA_URL", fake.metadata_url(ZONE, "lab"))
    r = run_tpuctl_process("supervise", EVIL, "--where", "host", "--provider", "gcp", "--project", PROJECT,
                           "--bucket", bucket)
    assert r.code == 2 and f"run {EVIL} is not pinned" in r.err, r.err
    assert not marker.exists()


def _train_detached(bucket: str, code: Path) -> str:
    r = run_tpuctl_process("train", "lab", "--job", "templates/bert-finetune-tiny.yaml",
                           "--set", f"bert_dir={bucket}/bert", "--set", f"train_file={bucket}/train.tsv",
                           "--workdir", str(code), "--bucket", bucket, "--detach", "--json")
    assert r.code == 0, r.err
    return r.json()["run_id"]


def _start_attempt(bucket: str, run_id: str) -> None:
    """What the run's supervisor writes for attempt 1 (its own code: command.json, then current.json)."""
    from provision.basics.config import Target
    from provision.cloud.base import Arch
    from provision.cloud.gcp import GcpProvider
    from provision.cloud.storage import open_bucket
    from provision.runs import pinning, training
    from provision.runs.executors import BucketExecutor
    from provision.runs.store import RunStore

    store = RunStore(open_bucket(bucket, Target(provider="gcp", project=PROJECT, zone=None)), run_id)
    rec = store.load()
    prov = GcpProvider(PROJECT)
    tpu = prov.get_tpu(ZONE, "lab")
    rec.attempt = {"n": 1, "started_at": time.time(), "workers": 1}
    rec.attempts = 1
    command = training.attempt_command(rec, 1, tpu)
    pinning.pin_attempt(prov, "lab", run_id, pinning.trusted_run_entry(prov, "lab", run_id), command, print,
                        record=rec)
    BucketExecutor(store, Arch.VM).start(rec, 1, tpu, command)
    store.save(rec)


def _wait_exit(get, run_id: str, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = get(f"tpuctl/runs/{run_id}/attempts/1/exit-0.json")
        if ended is not None:
            return ended
        time.sleep(0.2)
    raise AssertionError(f"attempt 1 of {run_id} did not end within {timeout} s")


@pytest.mark.parametrize("tamper", ["none", "workdir", "spec"])
def test_a_pinned_run_runs_with_the_code_and_spec_pinned_with_it_and_nothing_else(cloud, tmp_path, monkeypatch,
                                                                                  tamper):
    """``tpuctl train`` pins the run (its id, the sha256 of its spec, workdir archive and wheel) in
    the metadata of the host VM and the TPU VM. The worker's agent runs its attempt with exactly
    those bytes: a workdir archive replaced (with a ``jobs/__init__.py`` of the writer's), or a spec
    replaced, after the pin is refused before anything of it runs. The pinned code itself runs
    (``none``: its sitecustomize marks that it did)."""
    fake, bucket, put, get = cloud
    ours, theirs = tmp_path / "pinned-code-ran", tmp_path / "pwned"
    code = tmp_path / "code"
    code.mkdir()
    (code / "mymodel.py").write_text("UNITS = 8\n")
    if tamper != "workdir":       # the pinned code marks that it ran, and ends the job at once
        (code / "sitecustomize.py").write_text(MARK.format(path=str(ours)))
    run_id = _train_detached(bucket, code)
    meta = fake.resources()["nodes"][0]["metadata"]
    assert json.loads(meta["tpuctl-pin"])["run"][run_id]["spec"]
    if tamper == "workdir":
        evil = tmp_path / "evil"
        (evil / "jobs").mkdir(parents=True)
        (evil / "jobs" / "__init__.py").write_text(MARK.format(path=str(theirs)))
        digest = json.loads(meta["tpuctl-pin"])["run"][run_id]["workdir"]
        put(workdir.object_name(digest), workdir.pack(select(evil)).data)
    elif tamper == "spec":
        put(f"tpuctl/runs/{run_id}/spec.yaml", "job: bert-squad\n")
    _start_attempt(bucket, run_id)
    agent_pass(fake, bucket, "worker", monkeypatch)
    ended = _wait_exit(get, run_id)
    if tamper == "none":
        assert ended["code"] == 0 and "refused" not in ended, ended
        assert ours.read_text() == "ran"
    else:
        assert ended["code"] == 2, ended
        assert f"the {tamper} of run {run_id} in the bucket" in ended["refused"], ended
        assert "is not the one pinned in this host's metadata" in ended["refused"]
        assert not ours.exists() and not theirs.exists()
        # the supervisor gives up at once, with the host's reason (exit 2 is never retried)
        r = run_tpuctl_process("train", "lab", "--attach", "--poll", "1", "--json", timeout=180)
        assert r.code == 1, r.err
        assert r.json()["run"]["reason"] == f"a host refused the attempt: {ended['refused']}"
        assert f"a host refused the attempt: the {tamper} of run {run_id}" in r.err


def test_a_tpu_vm_recreated_after_a_preemption_is_pinned_again_from_the_host_vm(cloud, tmp_path, monkeypatch):
    """A recreated TPU VM boots without the pin. The supervisor (here: one on another machine, with
    no record of the run, as a host VM's supervisor is) takes the run's pin from where bucket
    writers cannot change it, the host VM's metadata, and pins the new TPU VM before it starts
    the attempt."""
    from provision.cloud.gcp import GcpProvider
    from provision.cluster import find, recreate_tpu
    from provision.runs import pinning
    from provision.runs.pins import KEY
    from provision.runs.training import cluster_spec_for

    fake, bucket, _put, _get = cloud
    code = tmp_path / "code"
    code.mkdir()
    (code / "mymodel.py").write_text("UNITS = 8\n")
    run_id = _train_detached(bucket, code)
    fake.preempt(ZONE, "lab")
    prov = GcpProvider(PROJECT)
    spec = cluster_spec_for(prov, "lab", find(prov, "lab").tpu, bucket=bucket)
    recreate_tpu(prov, spec, log=lambda _m: None)
    assert KEY not in prov.metadata_of("tpu", ZONE, "lab")
    monkeypatch.setenv("TPUCTL_HOME", str(tmp_path / "another-machine"))
    said: list[str] = []
    entry = pinning.trusted_run_entry(prov, "lab", run_id)
    pinning.ensure_run_pinned(prov, "lab", run_id, entry, said.append)
    assert said == [f"pinned run {run_id} on TPU lab"]
    monkeypatch.setenv("TPUCTL_METADATA_URL", fake.metadata_url(ZONE, "lab", worker=0))
    assert pinning.read_host_pin("gcp", "lab").entry("run", run_id) == entry
    assert entry["workdir"] and entry["spec"] and entry["wheel"] and entry["cluster"] == "lab"


def test_train_without_the_right_to_pin_stages_nothing_and_names_the_role(cloud, tmp_path, gcs_client):
    """The pin is written before anything is staged: an account that may write the bucket but not
    the hosts' metadata gets one line naming the role, and the bucket has no run."""
    fake, bucket, _put, _get = cloud
    fake.deny("compute.instances.setMetadata")
    r = run_tpuctl_process("train", "lab", "--job", "templates/bert-finetune-tiny.yaml",
                           "--set", f"bert_dir={bucket}/bert", "--set", f"train_file={bucket}/train.tsv",
                           "--bucket", bucket, "--detach")
    assert r.code == 1, r.err
    assert "compute.instances.setMetadata" in r.err and "roles/compute.instanceAdmin.v1" in r.err, r.err
    assert [b.name for b in gcs_client.list_blobs(bucket[5:], prefix="tpuctl/runs/")] == []
