"""The pod launch decision (provision.runs.launch): which workers run the job, which resolver
it uses, and the environment each worker gets.

What Google does for TensorFlow on TPU VMs, which these tests hold tpuctl to
(GoogleCloudPlatform/ml-auto-solutions, dags/solutions_team/configs/tensorflow/
solutionsteam_tf_nightly_supported_config.py): a pod slice runs the script on one worker
(``all_workers=not is_pod``) with ``TPU_LOAD_LIBRARY=0``; a single-host PJRT image runs it with
``TPU_NAME=local``, ``NEXT_PLUGGABLE_DEVICE_USE_C_API=true`` and
``TF_PLUGGABLE_DEVICE_LIBRARY_PATH=/lib/libtpu.so``. Where Google's tests name the slice,
tpuctl hands the client the workers' addresses (``grpc://IP:8470,...`` from the v2 node's
``networkEndpoints``), which TensorFlow resolves without the Cloud TPU API call that a TPU VM
account with only bucket roles may not make (tests/jobs/test_pod_resolver.py builds the
resolver from this environment).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from jobs import spec as jobspec
from provision.basics.errors import UsageError
from provision.cloud.base import Arch, Endpoint, TpuNode, TpuState
from provision.host.agent import FIXED_ENV_VALUES, JOB_ENV_KEYS
from provision.runs.launch import COORDINATOR_PORT, check_batches, plan, slice_network


def gcp(accelerator_type: str, arch: Arch = Arch.VM, runtime: str | None = None, endpoints=()):
    return plan(provider="gcp", arch=arch, accelerator_type=accelerator_type, tpu_name="lab",
                zone="us-central2-b", project="p-1", runtime=runtime, endpoints=endpoints)


def workers(n: int, base: str = "10.130.0.") -> list[Endpoint]:
    return [Endpoint(f"{base}{2 + i}", 8470) for i in range(n)]


@pytest.mark.parametrize("accelerator_type, hosts", [("v2-32", 4), ("v4-16", 2), ("v5litepod-16", 4)])
def test_a_pod_slice_runs_one_client_on_worker_0_that_reaches_every_worker_by_address(accelerator_type, hosts):
    p = gcp(accelerator_type, runtime="tpu-vm-tf-2.18.0-pod-pjrt", endpoints=workers(hosts))
    assert [w.worker for w in p.workers] == list(range(hosts))
    assert p.job_workers == (0,)
    addresses = ",".join(f"grpc://10.130.0.{2 + i}:8470" for i in range(hosts))
    assert p.resolver == addresses
    client = dict(p.workers[0].env)
    assert client["TPU_NAME"] == addresses and client["TPU_LOAD_LIBRARY"] == "0"
    assert client["TPUCTL_TPU_ZONE"] == "us-central2-b" and client["TPUCTL_TPU_PROJECT"] == "p-1"
    assert client["TPUCTL_SLICE_CORES"] == str(p.accelerator.cores)
    assert "NEXT_PLUGGABLE_DEVICE_USE_C_API" not in client   # the client must not load libtpu
    assert all(not w.runs_job and not w.env for w in p.workers[1:])
    # what the bucket command says to each host agent
    command = p.to_command()["workers"]
    assert command["0"]["run"] is True and [command[str(i)]["run"] for i in range(1, hosts)] == [False] * (hosts - 1)
    assert p.to_command()["resolver"] == addresses


def test_a_pod_slice_without_an_address_per_worker_falls_back_to_its_name():
    """Only when the cloud reported fewer endpoints than workers (or one without an address):
    the resolver then looks the slice up through the Cloud TPU API (tpu.nodes.get)."""
    assert gcp("v4-16", endpoints=workers(1)).workers[0].env["TPU_NAME"] == "lab"
    assert gcp("v4-16", endpoints=[Endpoint("10.0.0.2"), Endpoint("")]).resolver == "lab"
    assert gcp("v4-16").resolver == "lab"


def test_each_attempt_uses_the_addresses_of_the_slice_as_it_is_when_the_attempt_starts():
    """A preempted slice is recreated with new workers (new addresses); the supervisor plans every
    attempt from the node it has just read (provision.runs.supervisor: START_JOB after observe)."""
    from provision.runs.store import RunRecord
    from provision.runs.training import attempt_command

    rec = RunRecord(run_id="r-1", cluster="lab", provider="gcp", project="p-1", zone="us-central2-b",
                    bucket="gs://b", model_dir="gs://b/m", num_train_steps=10, save_checkpoints_steps=5)

    def node(base: str) -> TpuNode:
        return TpuNode(name="lab", zone="us-central2-b", arch=Arch.VM, accelerator_type="v4-16",
                       state=TpuState.READY, version="tpu-vm-tf-2.18.0-pod-pjrt", endpoints=workers(2, base))

    first = attempt_command(rec, 1, node("10.130.0."))
    second = attempt_command(rec, 2, node("10.130.1."))
    assert first["workers"]["0"]["env"]["TPU_NAME"] == "grpc://10.130.0.2:8470,grpc://10.130.0.3:8470"
    assert second["workers"]["0"]["env"]["TPU_NAME"] == "grpc://10.130.1.2:8470,grpc://10.130.1.3:8470"
    assert second["env"]["TPU_NAME"] == second["workers"]["0"]["env"]["TPU_NAME"]


def test_a_single_host_tpu_vm_runs_on_its_only_worker_with_the_local_resolver_and_pjrt():
    p = gcp("v2-8", runtime="tpu-vm-tf-2.16.1-pjrt")
    assert p.job_workers == (0,) and len(p.workers) == 1 and p.resolver == "local"
    env = dict(p.workers[0].env)
    assert env["TPU_NAME"] == "local"
    assert env["NEXT_PLUGGABLE_DEVICE_USE_C_API"] == "true"
    assert env["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"] == "/lib/libtpu.so"
    assert "TPU_LOAD_LIBRARY" not in env
    # an image without the PJRT plug-in gets no plug-in variables
    assert "NEXT_PLUGGABLE_DEVICE_USE_C_API" not in dict(gcp("v3-8", runtime="tpu-vm-tf-2.15.0").workers[0].env)


def test_a_tpu_node_job_runs_on_the_host_and_resolves_the_node_in_its_zone():
    p = gcp("v3-32", arch=Arch.NODE)
    assert len(p.workers) == 1 and p.resolver == "lab"
    env = dict(p.workers[0].env)
    assert env["TPU_NAME"] == "lab" and env["TPUCTL_TPU_ZONE"] == "us-central2-b"
    assert "TPU_LOAD_LIBRARY" not in env


def test_the_local_provider_emulates_a_slice_with_one_tf_config_worker_per_host():
    p = plan(provider="local", arch=Arch.VM, accelerator_type="v2-32", tpu_name="lab", zone="z",
             project="local", device="cpu", ports=[4001, 4002, 4003, 4004])
    assert p.job_workers == (0, 1, 2, 3) and p.resolver == "TF_CONFIG"
    for i, w in enumerate(p.workers):
        config = json.loads(w.env["TF_CONFIG"])
        assert config == {"cluster": {"worker": [f"127.0.0.1:{port}" for port in (4001, 4002, 4003, 4004)]},
                          "task": {"type": "worker", "index": i}}
        assert w.env["TPUCTL_DEVICE"] == "cpu" and w.env["TPUCTL_SLICE_CORES"] == "32"
    # GPUs are shared out whole, one set per emulated host
    g = plan(provider="local", arch=Arch.VM, accelerator_type="v4-16", tpu_name="lab", zone="z",
             project="local", device="gpu:4", ports=[1, 2])
    assert [w.env["CUDA_VISIBLE_DEVICES"] for w in g.workers] == ["0,1", "2,3"]
    single = plan(provider="local", arch=Arch.VM, accelerator_type="v2-8", tpu_name="lab", zone="z",
                  project="local", device="cpu")
    assert single.job_workers == (0,) and "TF_CONFIG" not in single.workers[0].env


def test_every_variable_a_plan_sets_passes_the_host_agents_filter():
    plans = [gcp("v2-32", runtime="tpu-vm-tf-2.18.0-pod-pjrt", endpoints=workers(4)), gcp("v2-8"), gcp("v2-8", arch=Arch.NODE),
             plan(provider="local", arch=Arch.VM, accelerator_type="v4-16", tpu_name="x", zone="z",
                  project="local", device="gpu:2", ports=[1, 2])]
    for p in plans:
        for w in p.workers:
            assert set(w.env) <= JOB_ENV_KEYS
            assert all(w.env[k] == v for k, v in FIXED_ENV_VALUES.items() if k in w.env)


def test_a_batch_that_the_slice_cannot_split_is_refused_in_the_words_of_the_fix():
    check_batches({"train_batch_size": 32, "eval_batch_size": 64}, "v2-32")
    with pytest.raises(UsageError) as err:
        check_batches({"train_batch_size": 16, "eval_batch_size": 8}, "v2-32")
    assert "train_batch_size 16 does not divide over the 32 cores of a v2-32 (4 hosts)" in err.value.one_line()
    assert "--set train_batch_size=32" in err.value.one_line()
    # evaluation and prediction batches are padded by the job to whole per-core batches: the
    # templates' 8 runs on a 32-core slice
    check_batches({"train_batch_size": 256, "eval_batch_size": 8, "predict_batch_size": 8}, "v2-32")


@pytest.mark.parametrize("template", sorted(p.name for p in (Path(__file__).parents[2] / "templates").glob("bert-*.yaml")))
def test_every_template_fits_a_v2_8_as_is_and_the_pods_with_the_readme_pod_batch(template):
    """docs/pods.md's pod example (`--set train_batch_size=256`) passes the check on a v3-32 and an
    emulated v2-32 for every job template, whatever eval_batch_size and predict_batch_size it
    keeps (the templates' 8 and 16 included: the job pads them); every template runs on a v2-8
    unchanged."""
    raw = yaml.safe_load((Path(__file__).parents[2] / "templates" / template).read_text())
    defaults = {f.name: f.default for f in dataclasses.fields(jobspec.JOBS[raw["job"]])
                if f.name.endswith("_batch_size")}
    resolved = {**defaults, **{k: v for k, v in raw.items() if v is not None}}
    assert any(k in resolved for k in ("eval_batch_size", "predict_batch_size"))
    check_batches(resolved, "v2-8")
    for pod in ("v3-32", "v2-32"):
        check_batches({**resolved, "train_batch_size": 256}, pod)


@pytest.mark.parametrize("accelerator, private_possible, exposed_ok, expected", [
    ("v2-8", False, False, False),     # one host opens no server: nothing to hide
    ("v4-16", True, False, True),      # a slice runs in a network of its own where one can be made
    ("v4-16", True, True, True),       # ... even when the user would accept the exposure
    ("v2-32", False, True, False),     # where none can, only with the user's explicit opt-in
])
def test_an_emulated_slice_runs_in_its_own_network_or_with_the_users_opt_in(accelerator, private_possible,
                                                                            exposed_ok, expected):
    assert slice_network(accelerator, private_possible=private_possible, exposed_ok=exposed_ok) is expected


def test_an_emulated_slice_with_nowhere_private_to_run_is_refused_naming_the_opt_in():
    with pytest.raises(UsageError) as err:
        slice_network("v2-32", private_possible=False, exposed_ok=False)
    line = err.value.one_line()
    assert line.startswith("an emulated v2-32 runs a TensorFlow gRPC server for each of its 4 hosts, on every network")
    assert line.endswith("set TPUCTL_SLICE_GRPC_ON_ALL_INTERFACES=1 to accept that")


def test_the_job_on_a_slice_learns_its_worker_index_count_and_coordinator():
    """Compute Engine sets no TPU worker metadata on MIG VMs that tpuctl can count on: the job gets
    TPUCTL_WORKER_INDEX, TPUCTL_NUM_WORKERS and TPUCTL_COORDINATOR (worker 0's address) from tpuctl."""
    p = gcp("v5p-32", runtime="ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e-v20260803", endpoints=workers(4))
    env = dict(p.workers[0].env)
    assert (env["TPUCTL_WORKER_INDEX"], env["TPUCTL_NUM_WORKERS"]) == ("0", "4")
    assert env["TPUCTL_COORDINATOR"] == f"10.130.0.2:{COORDINATOR_PORT}"
    one = dict(gcp("v6e-8", runtime="ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e-v20260803", endpoints=workers(1))
               .workers[0].env)
    assert (one["TPUCTL_WORKER_INDEX"], one["TPUCTL_NUM_WORKERS"]) == ("0", "1")
