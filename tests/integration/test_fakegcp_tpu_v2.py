"""Cloud TPU v2 (TPU VMs, queued resources) through google-cloud-tpu's REST client, over the wire."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.cloud import tpu_v2
from google.protobuf import duration_pb2

from tests.fakegcp import clients
from tests.fakegcp.clients import FAST_POLLING

ZONE = "us-central1-b"
RUNTIME = "tpu-vm-tf-2.16.1-pjrt"
State = tpu_v2.Node.State
QState = tpu_v2.QueuedResourceState.State


@pytest.fixture
def v2(fakegcp):
    fakegcp.set_latencies(tpu_create=0.3, tpu_delete=0.2, queued_provisioning=0.2)
    return clients.tpu_v2(fakegcp)


def _parent(fake) -> str:
    return f"projects/{fake.project}/locations/{ZONE}"


def _vm(**kw) -> tpu_v2.Node:
    return tpu_v2.Node(accelerator_type="v2-8", runtime_version=RUNTIME, **kw)


def test_preemptible_tpu_vm_create_get_list_delete(fakegcp, v2):
    parent = _parent(fakegcp)
    op = v2.create_node(parent=parent, node_id="bert-lab", node=_vm(
        scheduling_config=tpu_v2.SchedulingConfig(preemptible=True),
        network_config=tpu_v2.NetworkConfig(enable_external_ips=True),
        labels={"tpuctl-cluster": "bert-lab"}, metadata={"startup-script": "echo hi"}))
    assert not op.done()
    assert op.metadata.verb == "create" and op.metadata.target == f"{parent}/nodes/bert-lab"
    assert v2.get_node(name=f"{parent}/nodes/bert-lab").state == State.CREATING

    node = op.result(timeout=10, polling=FAST_POLLING)
    assert node.state == State.READY and node.health == tpu_v2.Node.Health.HEALTHY
    assert node.scheduling_config.preemptible
    assert node.api_version == tpu_v2.Node.ApiVersion.V2
    assert node.labels == {"tpuctl-cluster": "bert-lab"}
    assert node.metadata["startup-script"] == "echo hi"
    endpoint = node.network_endpoints[0]
    assert endpoint.ip_address.startswith("10.128.") and endpoint.port == 8470
    assert endpoint.access_config.external_ip

    assert v2.get_node(name=node.name) == node
    assert [n.name for n in v2.list_nodes(parent=parent)] == [node.name]

    v2.delete_node(name=node.name).result(timeout=10, polling=FAST_POLLING)
    with pytest.raises(gexc.NotFound):
        v2.get_node(name=node.name)


def test_list_pages_through_every_node(fakegcp, v2):
    parent = _parent(fakegcp)
    for i in range(3):
        v2.create_node(parent=parent, node_id=f"n{i}", node=_vm())
    fakegcp.clear_calls()
    names = [n.name.rsplit("/", 1)[1] for n in v2.list_nodes(request={"parent": parent, "page_size": 1})]
    assert names == ["n0", "n1", "n2"]
    assert fakegcp.call_counts() == {"tpu.v2.nodes.list": 3}


def test_list_every_zone_and_update_labels(fakegcp, v2):
    v2.create_node(parent=_parent(fakegcp), node_id="b", node=_vm())
    other = v2.create_node(parent=f"projects/{fakegcp.project}/locations/europe-west4-a", node_id="e", node=_vm())
    everywhere = v2.list_nodes(parent=f"projects/{fakegcp.project}/locations/-")
    assert sorted(n.name.split("/")[3] for n in everywhere) == ["europe-west4-a", "us-central1-b"]
    node = other.result(timeout=10, polling=FAST_POLLING)
    node.labels["tpuctl-keep"] = "true"
    updated = v2.update_node(node=node, update_mask={"paths": ["labels"]}).result(timeout=10, polling=FAST_POLLING)
    assert v2.get_node(name=node.name).labels == {"tpuctl-keep": "true"} == dict(updated.labels)


def test_stop_and_start(fakegcp, v2):
    parent = _parent(fakegcp)
    node = v2.create_node(parent=parent, node_id="n", node=_vm()).result(timeout=10, polling=FAST_POLLING)
    assert v2.stop_node(request={"name": node.name}).result(timeout=10, polling=FAST_POLLING).state == State.STOPPED
    with pytest.raises(gexc.BadRequest, match="Cannot stop"):
        v2.stop_node(request={"name": node.name})
    assert v2.start_node(request={"name": node.name}).result(timeout=10, polling=FAST_POLLING).state == State.READY


def test_invalid_requests_are_refused_at_the_call(fakegcp, v2):
    parent = _parent(fakegcp)
    with pytest.raises(gexc.BadRequest, match="not available in zone"):
        v2.create_node(parent=parent, node_id="n", node=tpu_v2.Node(accelerator_type="v4-8", runtime_version=RUNTIME))
    with pytest.raises(gexc.BadRequest, match="The field \"RuntimeVersion\" cannot be \"tf-9\""):
        v2.create_node(parent=parent, node_id="n", node=tpu_v2.Node(accelerator_type="v2-8", runtime_version="tf-9"))
    with pytest.raises(gexc.BadRequest, match="node_id"):
        v2.create_node(parent=parent, node_id="Bad_Name", node=_vm())
    with pytest.raises(gexc.NotFound, match="Location"):
        v2.list_nodes(parent=f"projects/{fakegcp.project}/locations/mars-east1-a")
    assert list(v2.list_nodes(parent=parent)) == []


def test_catalogue_and_service_identity(fakegcp, v2):
    parent = _parent(fakegcp)
    types = {t.type_ for t in v2.list_accelerator_types(parent=parent)}
    assert {"v2-8", "v2-32", "v3-8", "v6e-8"} <= types and "v4-8" not in types
    assert RUNTIME in {v.version for v in v2.list_runtime_versions(parent=parent)}
    locations = v2.list_locations(request={"name": f"projects/{fakegcp.project}"})
    assert {"us-central1-b", "europe-west4-a", "us-central2-b"} <= {loc.location_id for loc in locations.locations}
    identity = v2.generate_service_identity(request={"parent": parent}).identity
    assert identity.email.endswith("@cloud-tpu.iam.gserviceaccount.com")
    assert identity.email.startswith("service-") and identity.email[8:20].isdigit()


def test_queued_resource_goes_active_and_creates_its_node(fakegcp, v2):
    parent = _parent(fakegcp)
    qr = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(node_spec=[tpu_v2.QueuedResource.Tpu.NodeSpec(
            parent=parent, node_id="qnode", node=_vm(labels={"tpuctl-cluster": "q"}))]),
        spot=tpu_v2.QueuedResource.Spot())
    created = v2.create_queued_resource(parent=parent, queued_resource_id="q1", queued_resource=qr)
    assert created.result(timeout=10, polling=FAST_POLLING).state.state == QState.ACCEPTED
    name = f"{parent}/queuedResources/q1"
    seen = _states_until(v2, name, {QState.ACTIVE, QState.FAILED})
    assert seen[-2:] == [QState.PROVISIONING, QState.ACTIVE], seen
    node = v2.get_node(name=f"{parent}/nodes/qnode")
    assert node.state == State.READY and node.queued_resource == name and node.scheduling_config.spot

    with pytest.raises(gexc.BadRequest, match="force"):
        v2.delete_queued_resource(name=name)
    v2.delete_queued_resource(request={"name": name, "force": True}).result(timeout=10, polling=FAST_POLLING)
    assert list(v2.list_queued_resources(parent=parent)) == []
    assert list(v2.list_nodes(parent=parent)) == []


def test_queued_resource_waits_out_a_stockout(fakegcp, v2):
    parent = _parent(fakegcp)
    fakegcp.stockout(ZONE, count=2)
    v2.create_queued_resource(parent=parent, queued_resource_id="q", queued_resource=_one_node_qr(parent))
    seen = _states_until(v2, f"{parent}/queuedResources/q", {QState.ACTIVE, QState.FAILED})
    assert QState.WAITING_FOR_RESOURCES in seen and seen[-1] == QState.ACTIVE


def test_queued_resource_fails_when_valid_until_passes(fakegcp, v2):
    parent = _parent(fakegcp)
    fakegcp.stockout(ZONE)
    qr = _one_node_qr(parent)
    qr.queueing_policy = tpu_v2.QueuedResource.QueueingPolicy(valid_until_duration=duration_pb2.Duration(seconds=1))
    v2.create_queued_resource(parent=parent, queued_resource_id="q", queued_resource=qr)
    seen = _states_until(v2, f"{parent}/queuedResources/q", {QState.ACTIVE, QState.FAILED})
    assert seen[-1] == QState.FAILED
    failed = v2.get_queued_resource(name=f"{parent}/queuedResources/q")
    assert failed.state.state_initiator == tpu_v2.QueuedResourceState.StateInitiator.SERVICE
    assert failed.state.failed_data.error.code == 4
    assert list(v2.list_nodes(parent=parent)) == []


def _one_node_qr(parent: str) -> tpu_v2.QueuedResource:
    return tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[
        tpu_v2.QueuedResource.Tpu.NodeSpec(parent=parent, node_id="qnode", node=_vm())]))


def _states_until(v2, name: str, final: set, timeout: float = 10.0) -> list:
    """The distinct states a queued resource passes through, polled every 50 ms."""
    import time
    seen: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = v2.get_queued_resource(name=name).state.state
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in final:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{name} never reached {final}; saw {seen}")
