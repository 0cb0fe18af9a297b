"""The fake's Compute Engine TPUs, driven by Google's discovery-based client over the wire.

google-api-python-client builds every request from compute v1's discovery document
(``googleapiclient/discovery_cache/documents/compute.v1.json``), the same document the fake checks
bodies against: what Google's own client sends is accepted, and a body the document does not allow
is refused as Google refuses it (400 INVALID_ARGUMENT, ``Unknown name ... Cannot find field``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

ZONE = "us-east5-c"          # the fake's ct5p zone (tests/fakegcp/catalog.py)
REGION = "us-east5"


@pytest.fixture
def gce(fakegcp):
    from google.auth.credentials import AnonymousCredentials
    from googleapiclient import discovery

    fakegcp.set_latencies(vm_create=0.2, vm_delete=0.1, queued_provisioning=0.3)
    return discovery.build("compute", "v1", credentials=AnonymousCredentials(), static_discovery=True,
                           client_options={"api_endpoint": f"{fakegcp.url}/compute/v1/"}, cache_discovery=False)


def _wait(gce, project, op):
    while op["status"] != "DONE":
        if "zone" in op:
            op = gce.zoneOperations().wait(project=project, zone=op["zone"].rsplit("/", 1)[1],
                                           operation=op["name"]).execute()
        elif "region" in op:
            op = gce.regionOperations().wait(project=project, region=op["region"].rsplit("/", 1)[1],
                                             operation=op["name"]).execute()
        else:
            op = gce.globalOperations().wait(project=project, operation=op["name"]).execute()
    return op


def _slice(gce, project, name="s", *, model="SPOT", size=0):
    """A 2x2x4 v5p slice's parts, as tpuctl makes them: workload policy, template, MIG at size 0."""
    _wait(gce, project, gce.resourcePolicies().insert(project=project, region=REGION, body={
        "name": name, "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}}).execute())
    _wait(gce, project, gce.instanceTemplates().insert(project=project, body={
        "name": name, "properties": {
            "machineType": "ct5p-hightpu-4t", "labels": {"tpuctl-cluster": name},
            "scheduling": {"provisioningModel": model, "onHostMaintenance": "TERMINATE",
                           "instanceTerminationAction": "DELETE", "automaticRestart": False},
            "networkInterfaces": [{"network": "global/networks/default"}],
            "disks": [{"boot": True, "autoDelete": True, "initializeParams": {
                "sourceImage": "projects/ubuntu-os-accelerator-images/global/images/family/"
                               "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"}}]}}).execute())
    _wait(gce, project, gce.instanceGroupManagers().insert(project=project, zone=ZONE, body={
        "name": name, "versions": [{"instanceTemplate": f"global/instanceTemplates/{name}"}], "targetSize": size,
        "targetSizePolicy": {"mode": "BULK"},
        "resourcePolicies": {"workloadPolicy": f"projects/{project}/regions/{REGION}/resourcePolicies/{name}"},
        "instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"}}).execute())


def _mig(gce, project, name="s"):
    return gce.instanceGroupManagers().get(project=project, zone=ZONE, instanceGroupManager=name).execute()


def test_a_bulk_slice_comes_up_whole_with_its_topology_and_goes_as_one(fakegcp, gce):
    project = fakegcp.project
    _slice(gce, project)
    _wait(gce, project, gce.instanceGroupManagers().createInstances(
        project=project, zone=ZONE, instanceGroupManager="s",
        body={"instances": [{"name": f"s-{i}", "preservedState": {"metadata": {"tpuctl-worker-number": str(i)}}}
                            for i in range(4)]}).execute())
    deadline = time.monotonic() + 10
    while _mig(gce, project)["status"].get("appliedAcceleratorTopologies", [{}])[0].get("state") != "ACTIVE":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    mig = _mig(gce, project)
    assert mig["targetSize"] == 4 and mig["status"]["currentInstanceStatuses"] == {"running": 4}
    assert mig["status"]["appliedAcceleratorTopologies"][0]["acceleratorTopology"] == "2x2x4"
    managed = gce.instanceGroupManagers().listManagedInstances(project=project, zone=ZONE,
                                                             instanceGroupManager="s").execute()["managedInstances"]
    assert sorted(m["name"] for m in managed) == [f"s-{i}" for i in range(4)]
    worker = gce.instances().get(project=project, zone=ZONE, instance="s-2").execute()
    meta = {i["key"]: i["value"] for i in worker["metadata"]["items"]}
    assert meta["tpuctl-worker-number"] == "2" and meta["created-by"].endswith("/instanceGroupManagers/s")
    assert worker["machineType"].endswith("/ct5p-hightpu-4t") and worker["scheduling"]["provisioningModel"] == "SPOT"

    # a preempted worker (termination action DELETE) leaves the slice INCOMPLETE; its guest knew first
    guest = urllib.request.Request(f"{fakegcp.guest_metadata_url(ZONE, 's-1')}/instance/preempted",
                                   headers={"Metadata-Flavor": "Google"})
    assert urllib.request.urlopen(guest, timeout=5).read() == b"FALSE"
    fakegcp.preempt_instance(ZONE, "s-1", notice=0.3)
    assert urllib.request.urlopen(guest, timeout=5).read() == b"TRUE"
    time.sleep(0.4)
    assert _mig(gce, project)["status"]["appliedAcceleratorTopologies"][0]["state"] == "INCOMPLETE"

    # the template and policy cannot go while the MIG uses them; the MIG takes its VMs with it
    from googleapiclient.errors import HttpError

    with pytest.raises(HttpError) as used:
        gce.instanceTemplates().delete(project=project, instanceTemplate="s").execute()
    assert used.value.resp.status == 400 and "is already being used by" in str(used.value)
    _wait(gce, project, gce.instanceGroupManagers().delete(project=project, zone=ZONE, instanceGroupManager="s").execute())
    _wait(gce, project, gce.instanceTemplates().delete(project=project, instanceTemplate="s").execute())
    _wait(gce, project, gce.resourcePolicies().delete(project=project, region=REGION, resourcePolicy="s").execute())
    res = fakegcp.resources()
    assert not res["instances"] and not res["instanceGroupManagers"] and not res["instanceTemplates"]
    assert not res["resourcePolicies"]


def test_a_stocked_out_bulk_create_makes_no_vm_and_says_why_per_instance(fakegcp, gce):
    project = fakegcp.project
    _slice(gce, project)
    fakegcp.stockout(ZONE, kind="compute-tpu", model="SPOT")
    _wait(gce, project, gce.instanceGroupManagers().createInstances(
        project=project, zone=ZONE, instanceGroupManager="s",
        body={"instances": [{"name": f"s-{i}"} for i in range(4)]}).execute())
    managed = gce.instanceGroupManagers().listManagedInstances(project=project, zone=ZONE,
                                                             instanceGroupManager="s").execute()["managedInstances"]
    assert len(managed) == 4 and all(m["currentAction"] == "CREATING" and "instanceStatus" not in m for m in managed)
    error = managed[0]["lastAttempt"]["errors"]["errors"][0]
    assert error["code"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    info = next(d["errorInfo"] for d in error["errorDetails"] if "errorInfo" in d)
    assert info["reason"] == "resource_availability" and info["metadatas"]["vmType"] == "ct5p-hightpu-4t"
    assert not fakegcp.resources()["instances"]


def test_a_flex_start_resize_request_waits_then_succeeds_or_is_cancelled(fakegcp, gce):
    project = fakegcp.project
    _slice(gce, project, "f", model="FLEX_START")
    rrs = gce.instanceGroupManagerResizeRequests()
    fakegcp.stockout(ZONE, count=1, kind="compute-tpu", model="FLEX_START")
    _wait(gce, project, rrs.insert(project=project, zone=ZONE, instanceGroupManager="f", body={
        "name": "r1", "resizeBy": 4, "requestedRunDuration": {"seconds": "3600"}}).execute())
    seen = set()
    deadline = time.monotonic() + 10
    while (state := rrs.get(project=project, zone=ZONE, instanceGroupManager="f",
                            resizeRequest="r1").execute()["state"]) != "SUCCEEDED":
        seen.add(state)
        if state == "ACCEPTED":
            managed = gce.instanceGroupManagers().listManagedInstances(
                project=project, zone=ZONE, instanceGroupManager="f").execute()["managedInstances"]
            assert {m.get("instanceStatus") for m in managed} == {"PENDING"}
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert "ACCEPTED" in seen and _mig(gce, project, "f")["targetSize"] == 4

    fakegcp.stockout(ZONE, kind="compute-tpu", model="FLEX_START")        # no capacity until cleared
    _wait(gce, project, rrs.insert(project=project, zone=ZONE, instanceGroupManager="f", body={
        "name": "r2", "resizeBy": 4, "requestedRunDuration": {"seconds": "3600"}}).execute())
    _wait(gce, project, rrs.cancel(project=project, zone=ZONE, instanceGroupManager="f", resizeRequest="r2").execute())
    assert rrs.get(project=project, zone=ZONE, instanceGroupManager="f", resizeRequest="r2").execute()["state"] \
        == "CANCELLED"
    managed = gce.instanceGroupManagers().listManagedInstances(project=project, zone=ZONE,
                                                             instanceGroupManager="f").execute()["managedInstances"]
    assert len(managed) == 4 and {m["instanceStatus"] for m in managed} == {"RUNNING"}   # r1's, none of r2's


def _raw(fakegcp, method: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"{fakegcp.url}/compute/v1/projects/{fakegcp.project}/{path}",
                                 data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(("path", "body", "words"), [
    (f"zones/{ZONE}/instanceGroupManagers",
     {"name": "m", "instanceTemplate": "global/instanceTemplates/t", "targetSizePolicy": {"mode": "ALL_AT_ONCE"}},
     "Invalid value at 'resource.target_size_policy.mode'"),
    (f"regions/{REGION}/resourcePolicies",
     {"name": "p", "workloadPolicy": {"type": "HIGH_THROUGHPUT", "topology": "2x2x4"}},
     "Unknown name \"topology\" at 'resource.workload_policy': Cannot find field."),
    ("global/instanceTemplates", {"name": "t", "properties": {"machineType": "ct6e-standard-4t",
                                                             "scheduling": {"provisioningModel": "PREEMPTIBLE"}}},
     "Invalid value at 'resource.properties.scheduling.provisioning_model'"),
])
def test_a_body_the_discovery_document_does_not_allow_is_refused_in_googles_words(fakegcp, path, body, words):
    status, doc = _raw(fakegcp, "POST", path, body)
    assert status == 400 and doc["error"]["status"] == "INVALID_ARGUMENT" and words in doc["error"]["message"]
    assert not fakegcp.resources()["instanceGroupManagers"] and not fakegcp.resources()["instanceTemplates"]


def test_tpu_machine_types_and_image_families_are_the_zones(fakegcp, gce):
    project = fakegcp.project
    listed = gce.machineTypes().list(project=project, zone="us-central1-c",
                                     filter="name eq '(tpu7x-standard-1t|tpu7x-standard-4t|ct6e-standard-8t)'").execute()
    types = {m["name"]: m for m in listed["items"]}
    assert set(types) == {"tpu7x-standard-1t", "tpu7x-standard-4t"}           # no ct6e in us-central1-c
    assert types["tpu7x-standard-4t"]["guestCpus"] == 224
    assert types["tpu7x-standard-4t"]["accelerators"] == [{"guestAcceleratorType": "tpu7x", "guestAcceleratorCount": 4}]
    image = gce.images().getFromFamily(project="ubuntu-os-accelerator-images",
                                       family="ubuntu-accel-2404-amd64-tpu-tpu7x").execute()
    assert image["name"] == "ubuntu-accel-2404-amd64-tpu-tpu7x-v20260716"
    from googleapiclient.errors import HttpError

    with pytest.raises(HttpError) as missing:
        gce.images().getFromFamily(project="ubuntu-os-accelerator-images", family="ubuntu-accel-tpu-v9").execute()
    assert missing.value.resp.status == 404
