"""What a listed VM or TPU keeps of its metadata, and how a cluster's bucket is found from it.

Logic only: the GCP provider's readers (pure functions of an API answer) and
``cluster.cache.bucket_for`` with a provider whose ``metadata_of`` must not be called: the bucket a
list already carried costs no request per cluster.
"""

from __future__ import annotations

from provision.cloud.base import Arch, TpuNode, TpuState, Vm, VmState
from provision.cloud.gcp import GcpProvider
from provision.cluster.cache import bucket_for

SCRIPT = "#!/bin/bash\n" + "echo tpuctl\n" * 1500
INSTANCE = {"name": "bert", "zone": "projects/p/zones/us-central1-b", "status": "RUNNING",
            "labels": {"tpuctl-cluster": "bert", "tpuctl-role": "host"},
            "metadata": {"fingerprint": "f", "items": [{"key": "startup-script", "value": SCRIPT},
                                                      {"key": "tpuctl-bucket", "value": "gs://runs"},
                                                      {"key": "tpuctl-cluster", "value": "bert"}]}}
NODE = {"name": "projects/p/locations/us-central1-b/nodes/bert", "state": "READY", "acceleratorType": "v2-8",
        "labels": {"tpuctl-cluster": "bert"}, "apiVersion": "V2",
        "metadata": {"startup-script": SCRIPT, "tpuctl-bucket": "gs://runs", "tpuctl-role": "worker"}}


class NoReads:
    """A provider that answers nothing: any metadata read fails the test."""

    name = "gcp"
    project = "p"
    default_bucket = None

    def metadata_of(self, kind: str, zone: str, name: str) -> dict[str, str]:
        raise AssertionError(f"metadata_of({kind}, {zone}, {name}): a request the list made unneeded")


def test_a_listed_resource_keeps_tpuctl_keys_never_the_startup_script():
    vm = GcpProvider._vm(INSTANCE, with_metadata=True)
    assert vm.metadata == {"tpuctl-bucket": "gs://runs", "tpuctl-cluster": "bert"}
    node = GcpProvider._node(NODE, Arch.VM, with_metadata=True)
    assert node.metadata == {"tpuctl-bucket": "gs://runs", "tpuctl-role": "worker"}
    # read without its metadata (a list that did not ask for it): unknown, not empty
    assert GcpProvider._vm(INSTANCE).metadata is None and GcpProvider._node(NODE, Arch.VM).metadata is None
    # what --json prints of them is unchanged
    assert "metadata" not in vm.to_dict() and "metadata" not in node.to_dict()


def test_the_bucket_comes_from_what_the_list_carried(isolated_env):
    node = TpuNode(name="bert", zone="us-central1-b", arch=Arch.VM, accelerator_type="v2-8", state=TpuState.READY,
                   labels={"tpuctl-cluster": "bert"}, metadata={"tpuctl-bucket": "gs://runs"})
    vm = Vm(name="bert", zone="us-central1-b", state=VmState.RUNNING, labels={"tpuctl-cluster": "bert"})
    assert bucket_for(NoReads(), "bert", node=node, vm=vm) == ("gs://runs", "the TPU's tpuctl-bucket metadata")
    # a TPU VM listed without a bucket: its host VM has none either (both get it): no read
    node.metadata = {}
    assert bucket_for(NoReads(), "bert", node=node, vm=vm) == (None, "unknown")
