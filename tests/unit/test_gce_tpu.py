"""Compute Engine TPU bodies and read-back, and the capacity value: pure, no cloud.

Every body built here is checked against compute v1's discovery document (the one the fake cloud
validates with), so a field or enum value Google's API does not have fails here first.
"""

from __future__ import annotations

import json

import pytest

from provision.basics.errors import UsageError
from provision.cloud import capacity, gce_tpu
from provision.cloud.base import ClusterSpec, TpuState
from provision.cloud.capacity import Capacity
from tests.fakegcp import discovery


def _req(accelerator: str = "v5p-32", **kw) -> gce_tpu.Request:
    spec = ClusterSpec(name="lab", accelerator_type=accelerator, zones=("us-east5-c",), provider="gcp",
                       project="proj-one", **kw)
    return gce_tpu.Request(spec=spec, zone="us-east5-c", project="proj-one", image="img-v1",
                           metadata={"tpuctl-cluster": "lab"}, scopes=("https://www.googleapis.com/auth/cloud-platform",))


@pytest.mark.parametrize(("kw", "model", "extra"), [
    ({"spot": True}, "SPOT", {"instanceTerminationAction": "DELETE", "automaticRestart": False}),
    ({"capacity": ("flex-start",), "flex_seconds": 7200}, "FLEX_START",
     {"instanceTerminationAction": "DELETE", "maxRunDuration": {"seconds": "7200"}}),
    ({"capacity": ("reservation",), "reservation": "r1"}, "RESERVATION_BOUND", {"instanceTerminationAction": "DELETE"}),
    ({}, "STANDARD", {"automaticRestart": True}),
])
def test_each_capacity_amends_the_scheduling_and_every_body_is_one_compute_v1_allows(kw, model, extra):
    for accelerator in ("v5p-32", "v6e-8"):
        req = _req(accelerator, **kw)
        props = req.template()["properties"] if req.as_mig else req.instance()
        sched = props["scheduling"]
        assert sched["provisioningModel"] == model and sched["onHostMaintenance"] == "TERMINATE"
        assert {k: sched[k] for k in extra} == extra
        if model == "RESERVATION_BOUND":
            assert props["reservationAffinity"]["values"] == ["r1"]
        if req.as_mig:
            discovery.check("compute.instanceTemplates.insert", req.template())
            discovery.check("compute.instanceGroupManagers.insert", req.mig())
            if req.needs_policy:
                discovery.check("compute.resourcePolicies.insert", req.policy())
            discovery.check("compute.instanceGroupManagers.createInstances", req.create_instances())
            if model == "FLEX_START":
                discovery.check("compute.instanceGroupManagerResizeRequests.insert", req.resize_request())
        else:
            discovery.check("compute.instances.insert", req.instance())


def test_a_slice_is_a_bulk_mig_at_size_zero_with_its_topology_and_numbered_workers():
    req = _req("v5p-32", spot=True)
    assert req.as_mig and req.needs_policy
    assert req.policy()["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}
    mig = req.mig()
    assert mig["targetSize"] == 0 and mig["targetSizePolicy"] == {"mode": "BULK"}
    assert mig["resourcePolicies"]["workloadPolicy"] == "projects/proj-one/regions/us-east5/resourcePolicies/lab-tpu"
    assert req.template()["properties"]["machineType"] == "ct5p-hightpu-4t"       # a name, not a URL
    assert [w["preservedState"]["metadata"] for w in req.create_instances()["instances"]] == \
        [{"tpuctl-worker-number": str(i)} for i in range(4)]
    assert gce_tpu.zone_of(req.template()["description"]) == "us-east5-c"
    # a single-host flex-start TPU is a one-VM MIG (resize requests need one), without a workload policy
    one = _req("v6e-8", capacity=("flex-start",))
    assert one.as_mig and not one.needs_policy and "resourcePolicies" not in one.mig()


def _mig(state: str | None, target: int = 4, **about) -> dict:
    status = {"appliedAcceleratorTopologies": [{"acceleratorTopology": "2x2x4", "state": state}]} if state else {}
    desc = gce_tpu.DESCRIPTION_PREFIX + json.dumps({"accelerator": "v5p-32", "capacity": about.get("capacity", "spot"),
                                                    "labels": {"tpuctl-cluster": "lab"}})
    return {"name": "lab-tpu", "zone": "zones/us-east5-c", "description": desc, "targetSize": target, "status": status}


def _worker(i: int, status: str = "RUNNING") -> dict:
    return {"name": f"lab-tpu-{i}", "status": status, "machineType": "zones/z/machineTypes/ct5p-hightpu-4t",
            "networkInterfaces": [{"networkIP": f"10.0.0.{10 - i}"}],
            "metadata": {"items": [{"key": "tpuctl-worker-number", "value": str(i)}]}}


@pytest.mark.parametrize(("state", "workers", "expect"), [
    ("ACTIVE", [_worker(i) for i in range(4)], TpuState.READY),
    ("ACTIVATING", [_worker(i, "STAGING") for i in range(4)], TpuState.CREATING),
    ("ACTIVE_DEGRADED", [_worker(0, "TERMINATED")] + [_worker(i) for i in range(1, 4)], TpuState.PREEMPTED),
    ("INCOMPLETE", [_worker(i) for i in range(3)], TpuState.PREEMPTED),
    ("FAILED", [_worker(i) for i in range(4)], TpuState.PREEMPTED),
    ("DEACTIVATING", [], TpuState.DELETING),
])
def test_a_slice_reads_back_as_one_tpu_whose_state_the_supervisor_acts_on(state, workers, expect):
    node = gce_tpu.node_from_slice(_mig(state), workers)
    assert node is not None and node.name == "lab" and node.api == "compute" and node.state == expect
    assert node.accelerator_type == "v5p-32" and node.labels == {"tpuctl-cluster": "lab"}
    if expect == TpuState.READY:
        # endpoints in worker order, whatever order the list came in
        assert [e.ip_address for e in node.endpoints] == ["10.0.0.10", "10.0.0.9", "10.0.0.8", "10.0.0.7"]
    on_demand = gce_tpu.node_from_slice(_mig(state, capacity="on-demand"), workers)
    assert on_demand.state == (TpuState.TERMINATED if expect == TpuState.PREEMPTED else expect)


def test_instances_and_migs_that_are_not_tpuctl_tpus_are_not_read_as_tpus():
    assert gce_tpu.node_from_instance({"name": "lab", "machineType": "zones/z/machineTypes/ct6e-standard-8t"}) is None
    assert gce_tpu.node_from_instance({"name": "lab-tpu", "machineType": "zones/z/machineTypes/e2-standard-2"}) is None
    assert gce_tpu.node_from_slice({"name": "lab-tpu", "description": "someone's MIG"}, []) is None


def test_the_capacity_order_is_parsed_once_and_checked_before_anything():
    assert capacity.parse("spot, flex-start,on-demand") == (Capacity.SPOT, Capacity.FLEX_START, Capacity.ON_DEMAND)
    assert capacity.for_api(capacity.parse("spot,flex-start,reservation,on-demand"), "tpu") == \
        (Capacity.SPOT, Capacity.ON_DEMAND)
    with pytest.raises(UsageError, match="listed twice"):
        capacity.parse("spot,spot")
    spec = ClusterSpec(name="c", accelerator_type="v6e-8", zones=("us-east5-a",), capacity=("spot", "flex-start"))
    assert spec.flex_seconds == capacity.FLEX_DEFAULT_S            # 7 days unless --flex-start says
    assert spec.with_capacity("spot").spot and not spec.with_capacity("flex-start").interruptible
    with pytest.raises(UsageError, match="--queued and flex-start"):
        ClusterSpec(name="c", accelerator_type="v6e-8", zones=("us-east5-a",), capacity=("flex-start",), queued=True)
    with pytest.raises(UsageError, match="--api compute makes TPU VMs"):
        ClusterSpec(name="c", accelerator_type="v2-8", zones=("us-central1-b",), arch="node", api="compute")


def _op(kind: str, instance: str, at: str, user: str = "me@example.com", zone: str = "us-east5-a") -> dict:
    base = "https://www.googleapis.com/compute/v1/projects/p/zones"
    return {"operationType": kind, "targetLink": f"{base}/{zone}/instances/{instance}", "zone": f"{base}/{zone}",
            "insertTime": at, "user": user}


def test_a_preemption_stands_until_the_instance_is_made_again_or_deleted_by_someone():
    """Compute Engine keeps a preempted instance's record (compute.instances.preempted, by
    system) after the instance is gone: only a later creation, or a deletion by a user, ends it."""
    from provision.cloud.gce_tpu import preemptions

    pre = "compute.instances.preempted"
    ops = [_op("insert", "a-tpu", "2026-11-01T10:00:00.000-08:00"),
           _op(pre, "a-tpu", "2026-11-01T11:00:00.000-08:00", "system"),
           _op("delete", "a-tpu", "2026-11-01T11:00:01.000-08:00", "system"),     # the DELETE action's own
           _op(pre, "b-tpu", "2026-11-01T09:00:00.000-08:00", "system"),
           _op("insert", "b-tpu", "2026-11-01T18:00:00.000Z"),                    # made again after (offsets differ)
           _op(pre, "c-tpu", "2026-11-01T09:00:00.000-08:00", "system"),
           _op("delete", "c-tpu", "2026-11-01T09:30:00.000-08:00"),               # taken down after
           _op(pre, "d-tpu-0", "2026-11-01T09:00:00.000-08:00", "system"),        # a slice's worker: its MIG says
           _op(pre, "other", "2026-11-01T09:00:00.000-08:00", "system")]          # not tpuctl's
    (only,) = preemptions(ops)
    assert (only.cluster, only.zone, only.instance) == ("a", "us-east5-a", "a-tpu")
    from datetime import datetime, timezone

    assert only.at == datetime(2026, 11, 1, 19, 0, tzinfo=timezone.utc).timestamp()
