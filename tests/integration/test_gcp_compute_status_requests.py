"""``status NAME`` of a Compute Engine cluster reads what the cluster is, not everything it could be.

A cluster has one TPU. Its instances (one label-filtered ``instances.aggregatedList``, which its
host VM's read needs anyway) show a Compute Engine TPU VM whole, and a slice's workers name the
zone of its MIG; with the TPU found there, a Cloud TPU API node read (a 404), queued resources
(Compute Engine has none), the project's MIG list and the template and workload policy lists
(what an ``up`` cut short leaves) could add nothing, and each is a round trip a user waits for.
Where the instances show no TPU (a preempted Spot VM Compute Engine deleted, a flex-start slice
still waiting) those are read as before: test_gcp_compute_preempted.py, test_gcp_compute_tpu.py.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_tpuctl_process


@pytest.fixture(autouse=True)
def fast(fakegcp_env):
    fakegcp_env.set_latencies(vm_create=0.1, vm_delete=0.05, tpu_create=0.15, tpu_delete=0.1)


def _row(out: str, name: str) -> list[str]:
    (line,) = [ln for ln in out.splitlines() if ln.startswith(f"{name} ")]
    return re.split(r"\s{2,}", line.strip())


def test_status_of_a_compute_engine_cluster_is_its_instances_list_and_for_a_slice_its_mig(fakegcp_env, tpuctl):
    fake = fakegcp_env
    assert tpuctl("up", "ce", "--zone", "us-east5-a", "-a", "v6e-8", "--spot", "--api", "compute").code == 0
    assert tpuctl("up", "pod", "--zone", "us-east5-c", "-a", "v5p-32", "--spot", "--no-vm").code == 0

    fake.clear_calls()
    r = run_tpuctl_process("status", "ce")
    assert r.code == 0, r.err
    assert _row(r.out, "ce")[:9] == ["ce", "us-east5-a", "RUNNING", "v6e-8 (vm)", "compute", "READY", "HEALTHY", "-",
                                     "spot"]
    # its host VM and its TPU VM in one list: status NAME in 1 request (gcloud's describe takes 1)
    assert fake.call_counts() == {"compute.instances.aggregatedList": 1}

    fake.clear_calls()
    r = run_tpuctl_process("status", "pod")
    assert r.code == 0, r.err
    assert _row(r.out, "pod")[:9] == ["pod", "us-east5-c", "-", "v5p-32 (vm)", "compute", "READY", "HEALTHY", "-",
                                      "spot"]
    # the workers from that list, the slice's size and state from its MIG, listed by name in their zone
    assert fake.call_counts() == {"compute.instances.aggregatedList": 1, "compute.instanceGroupManagers.list": 1}
