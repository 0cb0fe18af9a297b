"""Cloud TPU v1 (TPU Nodes) through google-cloud-tpu's gRPC client, and the CIDR rules behind it."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1, tpu_v1, tpu_v2

from tests.fakegcp import clients
from tests.fakegcp.clients import FAST_POLLING

ZONE = "us-central1-b"
State = tpu_v1.Node.State


@pytest.fixture
def v1(fakegcp):
    fakegcp.set_latencies(tpu_create=0.2, tpu_delete=0.1)
    fakegcp.allow_tpu_nodes()       # a project that kept TPU Node access
    return clients.tpu_v1(fakegcp)


def _parent(fake) -> str:
    return f"projects/{fake.project}/locations/{ZONE}"


def _node(cidr: str | None = "10.240.1.0/29", **kw) -> tpu_v1.Node:
    return tpu_v1.Node(accelerator_type="v2-8", tensorflow_version="2.12.0", cidr_block=cidr, **kw)


def _create(v1, fake, node_id: str, node: tpu_v1.Node) -> tpu_v1.Node:
    return v1.create_node(parent=_parent(fake), node_id=node_id, node=node).result(timeout=10, polling=FAST_POLLING)


def test_tpu_node_create_get_list_delete(fakegcp, v1):
    parent = _parent(fakegcp)
    op = v1.create_node(parent=parent, node_id="bert-tpu", node=_node(
        scheduling_config=tpu_v1.SchedulingConfig(preemptible=True), labels={"tpuctl-cluster": "bert"}))
    assert not op.done() and op.metadata.verb == "create"
    node = op.result(timeout=10, polling=FAST_POLLING)
    assert node.state == State.READY and node.health == tpu_v1.Node.Health.HEALTHY
    assert node.cidr_block == "10.240.1.0/29" and node.tensorflow_version == "2.12.0"
    assert node.scheduling_config.preemptible and node.api_version == tpu_v1.Node.ApiVersion.V1
    assert [(e.ip_address, e.port) for e in node.network_endpoints] == [("10.240.1.2", 8470)]
    assert node.service_account.endswith("@cloud-tpu.iam.gserviceaccount.com")

    assert v1.get_node(name=node.name) == node
    assert [n.name for n in v1.list_nodes(parent=parent)] == [node.name]
    deleted = v1.delete_node(name=node.name).result(timeout=10, polling=FAST_POLLING)
    assert deleted.name == node.name  # v1's delete answers with the node, v2's with Empty
    with pytest.raises(gexc.NotFound):
        v1.get_node(name=node.name)


def test_multi_host_node_has_an_endpoint_per_host(fakegcp, v1):
    node = _create(v1, fakegcp, "pod", tpu_v1.Node(accelerator_type="v3-32", tensorflow_version="2.12.0",
                                                   cidr_block="10.240.2.0/29"))
    assert [e.ip_address for e in node.network_endpoints] == [f"10.240.2.{i}" for i in (2, 3, 4, 5)]
    with pytest.raises(gexc.InvalidArgument, match="needs a /28"):
        v1.create_node(parent=_parent(fakegcp), node_id="big", node=tpu_v1.Node(
            accelerator_type="v3-64", tensorflow_version="2.12.0", cidr_block="10.240.3.0/29"))


def test_node_without_a_range_gets_a_free_one(fakegcp, v1):
    first = _create(v1, fakegcp, "a", _node("10.240.0.0/29"))
    second = _create(v1, fakegcp, "b", _node(None))
    assert second.cidr_block == "10.240.0.8/29" != first.cidr_block


def test_duplicate_name_is_already_exists(fakegcp, v1):
    _create(v1, fakegcp, "n", _node())
    with pytest.raises(gexc.AlreadyExists):
        v1.create_node(parent=_parent(fakegcp), node_id="n", node=_node("10.240.5.0/29"))


@pytest.mark.parametrize("occupy", ["subnet", "secondary", "route", "peering", "address", "node"])
def test_cidr_conflict_arrives_when_the_operation_completes(fakegcp, v1, occupy):
    project = fakegcp.project
    # the node must still be CREATING when it is read right after the create call, however loaded
    # the machine: a create that takes 2 s leaves room for that read
    fakegcp.set_latencies(tpu_create=2.0, tpu_delete=0.1)
    if occupy == "subnet":
        fakegcp.add_subnetwork("tpu-sub", "us-central1", "10.240.0.0/23")
    elif occupy == "secondary":
        fakegcp.add_subnetwork("gke", "us-central1", "10.250.0.0/24", secondary={"pods": "10.240.1.0/28"})
    elif occupy == "route":
        fakegcp.add_route("10.240.1.0/30", next_hop_ip="10.128.0.9")
    elif occupy == "peering":
        fakegcp.add_peering("servicenetworking", ["10.240.0.0/16"])
    elif occupy == "address":
        _reserve(fakegcp, "someone-else", "10.240.1.0", 29)
    else:
        _create(v1, fakegcp, "first", _node())
    op = v1.create_node(parent=_parent(fakegcp), node_id="late", node=_node())
    assert v1.get_node(name=f"{_parent(fakegcp)}/nodes/late").state == State.CREATING
    with pytest.raises(gexc.InvalidArgument) as info:
        op.result(timeout=10, polling=FAST_POLLING)
    assert info.value.code == 400 and op.exception().grpc_status_code.value[0] == 3
    assert info.value.message == (
        "The 'CIDR Range' value \"10.240.1.0/29\" on network "
        f"\"projects/{project}/global/networks/default\" conflicts with another subnet or object "
        "in the (peered) customer network.")
    with pytest.raises(gexc.NotFound):
        v1.get_node(name=f"{_parent(fakegcp)}/nodes/late")


def test_wide_routes_and_the_nodes_own_reservation_do_not_conflict(fakegcp, v1):
    fakegcp.add_route("10.0.0.0/7", next_hop_ip="10.128.0.9")    # shorter than /8: ignored
    _reserve(fakegcp, "bert-range", "10.240.1.0", 29, labels={"tpu-node": "bert"})
    assert _create(v1, fakegcp, "bert", _node()).state == State.READY


def test_both_apis_list_both_architectures(fakegcp, v1):
    _create(v1, fakegcp, "node-arch", _node())
    v2 = clients.tpu_v2(fakegcp)
    v2.create_node(parent=_parent(fakegcp), node_id="vm-arch", node=tpu_v2.Node(
        accelerator_type="v2-8", runtime_version="tpu-vm-tf-2.16.1-pjrt")).result(timeout=10, polling=FAST_POLLING)
    seen_v1 = {n.name.rsplit("/", 1)[1]: n.api_version for n in v1.list_nodes(parent=_parent(fakegcp))}
    seen_v2 = {n.name.rsplit("/", 1)[1]: n.api_version for n in v2.list_nodes(parent=_parent(fakegcp))}
    assert seen_v1 == {"node-arch": tpu_v1.Node.ApiVersion.V1, "vm-arch": tpu_v1.Node.ApiVersion.V2_ALPHA1}
    assert seen_v2 == {"node-arch": tpu_v2.Node.ApiVersion.V1, "vm-arch": tpu_v2.Node.ApiVersion.V2}


def test_reimage_stop_start(fakegcp, v1):
    node = _create(v1, fakegcp, "n", _node())
    node = v1.reimage_node(request={"name": node.name, "tensorflow_version": "2.14.0"}).result(
        timeout=10, polling=FAST_POLLING)
    assert node.tensorflow_version == "2.14.0" and node.state == State.READY
    assert v1.stop_node(request={"name": node.name}).result(timeout=10, polling=FAST_POLLING).state == State.STOPPED
    assert v1.start_node(request={"name": node.name}).result(timeout=10, polling=FAST_POLLING).state == State.READY
    assert "2.12.0" in {v.version for v in v1.list_tensor_flow_versions(parent=_parent(fakegcp))}
    assert "v3-8" in {t.type_ for t in v1.list_accelerator_types(parent=_parent(fakegcp))}


def _reserve(fake, name: str, address: str, prefix: int, labels: dict | None = None) -> None:
    addresses = clients.compute(compute_v1.GlobalAddressesClient, fake)
    op = addresses.insert(project=fake.project, address_resource=compute_v1.Address(
        name=name, address=address, prefix_length=prefix, address_type="INTERNAL", purpose="VPC_PEERING",
        network=f"projects/{fake.project}/global/networks/default", labels=labels or {}))
    done = clients.compute(compute_v1.GlobalOperationsClient, fake).wait(project=fake.project, operation=op.name)
    assert not done.error.errors, done.error


def test_tpu_nodes_are_refused_unless_the_project_kept_node_access(fakegcp):
    """Since 2025 Google refuses new TPU Nodes: the create call fails FAILED_PRECONDITION (HTTP 400 over
    REST) with "Your request to provision TPU Node has been denied. Please migrate to TPU VM
    Architecture or contact Cloud TPU team to gain TPU Node access." (gcloud's output pasted in
    skypilot-org/skypilot#5593). A project the Cloud TPU team allowed keeps creating them."""
    import requests

    v1 = clients.tpu_v1(fakegcp)
    with pytest.raises(gexc.FailedPrecondition, match="provision TPU Node has been denied"):
        v1.create_node(parent=_parent(fakegcp), node_id="refused", node=_node())
    rest = requests.post(f"{fakegcp.url}/v1/{_parent(fakegcp)}/nodes", params={"nodeId": "refused"}, timeout=10,
                         json={"acceleratorType": "v2-8", "tensorflowVersion": "2.12.0"})
    assert rest.status_code == 400 and rest.json()["error"]["status"] == "FAILED_PRECONDITION"
    assert "migrate to TPU VM Architecture" in rest.json()["error"]["message"]
    assert fakegcp.resources()["nodes"] == []

    fakegcp.allow_tpu_nodes()
    assert _create(v1, fakegcp, "allowed", _node()).state == State.READY
    other = "another-project"           # access is granted per project
    with pytest.raises(gexc.FailedPrecondition):
        v1.create_node(parent=f"projects/{other}/locations/{ZONE}", node_id="refused", node=_node())
    # TPU VMs (v2) are never refused
    clients.tpu_v2(fakegcp).create_node(parent=_parent(fakegcp), node_id="vm", node=tpu_v2.Node(
        accelerator_type="v2-8", runtime_version="tpu-vm-tf-2.16.1-pjrt")).result(timeout=10, polling=FAST_POLLING)


@pytest.mark.parametrize(("status", "error"), [(404, gexc.NotFound), (403, gexc.PermissionDenied)])
def test_the_v1_api_can_be_gone_or_closed(fakegcp, v1, status, error):
    """A world without v1: every v1 call, REST or gRPC, answers 404 or 403; v2 is unaffected."""
    import requests

    node = _create(v1, fakegcp, "legacy", _node())
    fakegcp.tpu_v1_unavailable(status)
    with pytest.raises(error):
        v1.get_node(name=node.name)
    with pytest.raises(error):
        v1.list_nodes(parent=_parent(fakegcp))
    assert requests.get(f"{fakegcp.url}/v1/{node.name}", timeout=10).status_code == status
    v2_view = clients.tpu_v2(fakegcp).get_node(name=node.name)
    assert v2_view.api_version == tpu_v2.Node.ApiVersion.V1 and v2_view.cidr_block == "10.240.1.0/29"
    fakegcp.tpu_v1_unavailable(None)
    assert v1.get_node(name=node.name).name == node.name
