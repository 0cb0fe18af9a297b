"""The fake's queued resources judged by what Google sends, through google-cloud-tpu's REST client.

tpuctl's handling of queued resources (tests/integration/test_gcp_queued.py) is only as right as
these behaviours of the fake, so each cites where Google states it:

- states: google-cloud-tpu 1.28 ``tpu_v2.QueuedResourceState.State`` (CREATING, ACCEPTED,
  PROVISIONING, FAILED, DELETING, ACTIVE, SUSPENDING, SUSPENDED, WAITING_FOR_RESOURCES) and
  https://cloud.google.com/tpu/docs/queued-resources: "FAILED ... The request remains in the
  queue until it is explicitly deleted"; "SUSPENDED: The resources specified in the request have
  been deleted. ... it's no longer eligible for further allocation"; "WAITING_FOR_RESOURCES
  replaced the ACCEPTED state".
- delete: ``tpu_v2.DeleteQueuedResourceRequest.force``: "If set to true, all running nodes
  belonging to this queued resource will be deleted first and then the queued resource will be
  deleted. Otherwise (i.e. force=false), the queued resource will only be deleted if its nodes
  have already been deleted or the queued resource is in the ACCEPTED, FAILED, or SUSPENDED
  state"; gcloud 528 (command_lib/compute/tpus/queued_resources/flags.yaml, ``--force``): "If set
  to true, any nodes in this queued resource will also be deleted. Otherwise, the request will
  only work if the queued resource has no nodes."
- a second create of the same ``queuedResourceId``: ALREADY_EXISTS, which google/rpc/code.proto
  (googleapis-common-protos) maps to "HTTP Mapping: 409 Conflict" ("The entity that a client
  attempted to create ... already exists").
- FAILED and SUSPENDED requests keep holding quota until deleted, and Ctrl-C of a script that
  waits on one leaves it behind: marin-community/marin#87 (quoting stanford-crfm/levanter#666).
- listing every zone: ``gcloud compute tpus queued-resources list --zone=-`` "covers them all"
  (the tear-down section of WandLZhang/tpu-mech-interp's README), as ``nodes`` list does.
"""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions as gexc
from google.cloud import tpu_v2
from google.protobuf import duration_pb2

from tests.fakegcp import clients
from tests.fakegcp.clients import FAST_POLLING

ZONE = "us-central1-b"
RUNTIME = "tpu-vm-tf-2.16.1-pjrt"
QState = tpu_v2.QueuedResourceState.State


@pytest.fixture
def v2(fakegcp):
    fakegcp.set_latencies(tpu_create=0.2, tpu_delete=0.1, queued_provisioning=0.1)
    return clients.tpu_v2(fakegcp)


def _parent(fake, zone: str = ZONE) -> str:
    return f"projects/{fake.project}/locations/{zone}"


def _request(parent: str, node_id: str, **kw) -> tpu_v2.QueuedResource:
    node = tpu_v2.Node(accelerator_type="v2-8", runtime_version=RUNTIME, labels={"tpuctl-cluster": node_id})
    return tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[
        tpu_v2.QueuedResource.Tpu.NodeSpec(parent=parent, node_id=node_id, node=node)]), **kw)


def _until(v2, name: str, states: set, timeout: float = 10.0) -> tpu_v2.QueuedResource:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        qr = v2.get_queued_resource(name=name)
        if qr.state.state in states:
            return qr
        time.sleep(0.05)
    raise AssertionError(f"{name} never reached {states}")


def test_creating_the_same_queued_resource_again_is_409_already_exists(fakegcp, v2):
    parent = _parent(fakegcp)
    fakegcp.stockout(ZONE)                      # it waits, and keeps its name
    v2.create_queued_resource(parent=parent, queued_resource_id="dup", queued_resource=_request(parent, "dup"))
    with pytest.raises(gexc.Conflict) as err:
        v2.create_queued_resource(parent=parent, queued_resource_id="dup", queued_resource=_request(parent, "dup"))
    assert err.value.code == 409
    assert err.value.response.json()["error"]["status"] == "ALREADY_EXISTS"
    assert len(list(v2.list_queued_resources(parent=parent))) == 1


def test_a_waiting_request_is_deleted_without_force(fakegcp, v2):
    parent = _parent(fakegcp)
    fakegcp.stockout(ZONE)
    v2.create_queued_resource(parent=parent, queued_resource_id="w", queued_resource=_request(parent, "w"))
    name = f"{parent}/queuedResources/w"
    qr = _until(v2, name, {QState.WAITING_FOR_RESOURCES})
    assert list(v2.list_nodes(parent=parent)) == []           # waiting: no node yet
    assert qr.tpu.node_spec[0].node.labels["tpuctl-cluster"] == "w"   # the node spec is echoed back
    v2.delete_queued_resource(name=name).result(timeout=10, polling=FAST_POLLING)
    assert list(v2.list_queued_resources(parent=parent)) == []


def test_a_request_holding_a_node_needs_force_and_force_deletes_the_node(fakegcp, v2):
    parent = _parent(fakegcp)
    v2.create_queued_resource(parent=parent, queued_resource_id="a", queued_resource=_request(parent, "a"))
    name = f"{parent}/queuedResources/a"
    _until(v2, name, {QState.ACTIVE})
    with pytest.raises(gexc.BadRequest) as err:
        v2.delete_queued_resource(name=name)
    assert err.value.response.json()["error"]["status"] == "FAILED_PRECONDITION"
    v2.delete_queued_resource(request={"name": name, "force": True}).result(timeout=10, polling=FAST_POLLING)
    assert list(v2.list_queued_resources(parent=parent)) == [] and list(v2.list_nodes(parent=parent)) == []


def test_a_failed_request_stays_until_deleted_and_needs_no_force(fakegcp, v2):
    parent = _parent(fakegcp)
    fakegcp.stockout(ZONE)
    qr = _request(parent, "f", queueing_policy=tpu_v2.QueuedResource.QueueingPolicy(
        valid_until_duration=duration_pb2.Duration(seconds=1)))
    v2.create_queued_resource(parent=parent, queued_resource_id="f", queued_resource=qr)
    name = f"{parent}/queuedResources/f"
    failed = _until(v2, name, {QState.FAILED})
    time.sleep(0.5)
    assert v2.get_queued_resource(name=name).state.state == QState.FAILED     # still there, still FAILED
    assert failed.state.failed_data.error.message
    v2.delete_queued_resource(name=name).result(timeout=10, polling=FAST_POLLING)
    assert list(v2.list_queued_resources(parent=parent)) == []


def test_a_request_whose_node_is_deleted_is_suspended_and_deleted_without_force(fakegcp, v2):
    parent = _parent(fakegcp)
    v2.create_queued_resource(parent=parent, queued_resource_id="s", queued_resource=_request(parent, "s"))
    name = f"{parent}/queuedResources/s"
    _until(v2, name, {QState.ACTIVE})
    v2.delete_node(name=f"{parent}/nodes/s").result(timeout=10, polling=FAST_POLLING)
    assert v2.get_queued_resource(name=name).state.state == QState.SUSPENDED
    v2.delete_queued_resource(name=name).result(timeout=10, polling=FAST_POLLING)
    assert list(v2.list_queued_resources(parent=parent)) == []


def test_zone_dash_lists_the_requests_of_every_zone(fakegcp, v2):
    fakegcp.stockout(ZONE)
    fakegcp.stockout("europe-west4-a")
    for zone, qid in ((ZONE, "one"), ("europe-west4-a", "two")):
        parent = _parent(fakegcp, zone)
        v2.create_queued_resource(parent=parent, queued_resource_id=qid, queued_resource=_request(parent, qid))
    names = sorted(q.name.rsplit("/", 1)[-1] for q in v2.list_queued_resources(parent=_parent(fakegcp, "-")))
    assert names == ["one", "two"]
    assert [q.name for q in v2.list_queued_resources(parent=_parent(fakegcp))] == [f"{_parent(fakegcp)}/queuedResources/one"]
