"""What tpuctl reads of each Google resource: the ``fields`` of its lists and gets. Pure.

A list answers only what is named here (Google's partial responses:
https://cloud.google.com/compute/docs/api/how-tos/performance#partial-response), so a fleet of
thousands of clusters costs bytes in proportion to what tpuctl reads of each resource, not to
what each carries (a startup script in its metadata is ~18 KB). Each constant names exactly what
the reader beside it reads (``gcp.GcpProvider._vm``, ``gcp.GcpProvider._node``,
``gcp.GcpProvider._queued``, ``gce_tpu.node_from_instance`` / ``node_from_slice``): a field read
there and missing here reads as absent, which tests/integration/test_fleet_reads.py catches by
comparing every command's output with and without partial responses.

Metadata is asked for only where it is read (the reaper's ``tpuctl-bucket``, a Compute Engine
TPU worker's number and image): Compute's ``metadata.items`` is a list of key/value pairs, which
a field selection cannot cut down to some keys.
"""

from __future__ import annotations

# ---- Compute Engine instances (host VMs; Compute Engine TPU workers) ----------------------------------
VM = ("name,zone,status,machineType,labels,creationTimestamp,"
      "networkInterfaces(networkIP,network,accessConfigs/natIP)")
VM_WITH_METADATA = VM + ",metadata/items"
# a Compute Engine TPU worker: the VM's fields, its scheduling (capacity), and its metadata
# (tpuctl-worker-number, tpuctl-image)
TPU_INSTANCE = VM + ",scheduling/provisioningModel,metadata/items"

# ---- Cloud TPU API nodes ------------------------------------------------------------------------------
NODE = ("name,acceleratorType,state,health,healthDescription,cidrBlock,schedulingConfig,runtimeVersion,"
        "networkConfig/network,labels,networkEndpoints(ipAddress,port),createTime,apiVersion,queuedResource")
NODE_WITH_METADATA = NODE + ",metadata"
QUEUED = "name,createTime,spot,state(state,failedData/error/message),tpu/nodeSpec(nodeId,node(acceleratorType,labels))"

# ---- what a TPU range must avoid (``used_ranges``) --------------------------------------------------
SUBNET = "name,region,network,ipCidrRange,secondaryIpRanges(rangeName,ipCidrRange)"
ROUTE = "name,network,destRange"
ADDRESS = "name,address,prefixLength,purpose,addressType,network"

# ---- a MIG of a Compute Engine TPU slice -------------------------------------------------------------
MIG = "name,zone,description,targetSize,creationTimestamp,currentActions/deleting,status/appliedAcceleratorTopologies"


def listed(key: str, item: str) -> str:
    """A list's ``fields``: ``item`` of every element of ``key``, and what paging needs."""
    return f"{key}({item}),nextPageToken"


def aggregated(key: str, item: str) -> str:
    """An aggregatedList's ``fields``: ``item`` of every element of ``key`` in every scope."""
    return f"items/*/{key}({item}),nextPageToken"


def tpu_listed(key: str, item: str) -> str:
    """A Cloud TPU API list's ``fields`` (``unreachable``: the locations that did not answer)."""
    return f"{key}({item}),nextPageToken,unreachable"


def tpuctl_keys(items: dict[str, str]) -> dict[str, str]:
    """tpuctl's own keys of a resource's metadata (``tpuctl-*``): never its startup script."""
    return {k: v for k, v in items.items() if isinstance(k, str) and k.startswith("tpuctl-")}
