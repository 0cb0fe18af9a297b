"""Every admin injection, observed the way tpuctl will observe it: through Google's clients."""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1, tpu_v1, tpu_v2
from google.rpc import error_details_pb2

from tests.fakegcp import clients
from tests.fakegcp.clients import FAST_POLLING
from tests.fakegcp.fixture import FakeGCPError

ZONE = "us-central1-b"
RUNTIME = "tpu-vm-tf-2.16.1-pjrt"


@pytest.fixture
def v2(fakegcp):
    fakegcp.set_latencies(tpu_create=0.2, tpu_delete=0.1)
    return clients.tpu_v2(fakegcp)


@pytest.fixture
def v1(fakegcp):
    fakegcp.set_latencies(tpu_create=0.2, tpu_delete=0.1)
    fakegcp.allow_tpu_nodes()       # a project that kept TPU Node access
    return clients.tpu_v1(fakegcp)


def _parent(fake) -> str:
    return f"projects/{fake.project}/locations/{ZONE}"


def _create_vm(v2, fake, node_id: str = "n"):
    return v2.create_node(parent=_parent(fake), node_id=node_id, node=tpu_v2.Node(
        accelerator_type="v2-8", runtime_version=RUNTIME, scheduling_config=tpu_v2.SchedulingConfig(preemptible=True)))


def _create_node(v1, fake, node_id: str = "n", cidr: str = "10.240.1.0/29"):
    return v1.create_node(parent=_parent(fake), node_id=node_id, node=tpu_v1.Node(
        accelerator_type="v2-8", tensorflow_version="2.12.0", cidr_block=cidr))


def test_stockout_fails_the_operation_with_code_8_for_n_creates(fakegcp, v2, v1):
    fakegcp.stockout(ZONE, count=2)
    for op in (_create_vm(v2, fakegcp, "a"), _create_node(v1, fakegcp, "b")):
        with pytest.raises(gexc.ResourceExhausted) as info:
            op.result(timeout=10, polling=FAST_POLLING)
        assert info.value.grpc_status_code.value[0] == 8
        assert info.value.message.startswith(f'There is no more capacity in the zone "{ZONE}"')
    assert _create_vm(v2, fakegcp, "c").result(timeout=10, polling=FAST_POLLING).state == tpu_v2.Node.State.READY


def test_stockout_until_cleared(fakegcp, v2):
    fakegcp.stockout(ZONE)
    for name in ("a", "b"):
        with pytest.raises(gexc.ResourceExhausted):
            _create_vm(v2, fakegcp, name).result(timeout=10, polling=FAST_POLLING)
    elsewhere = v2.create_node(parent=f"projects/{fakegcp.project}/locations/us-central1-c", node_id="a",
                               node=tpu_v2.Node(accelerator_type="v2-8", runtime_version=RUNTIME))
    assert elsewhere.result(timeout=10, polling=FAST_POLLING).state == tpu_v2.Node.State.READY
    fakegcp.clear_stockout(ZONE)
    assert _create_vm(v2, fakegcp, "c").result(timeout=10, polling=FAST_POLLING).name.endswith("/c")


def test_burst_of_503_is_seen_by_the_client_then_clears(fakegcp, v2, v1):
    name = f"{_parent(fakegcp)}/nodes/n"
    _create_vm(v2, fakegcp).result(timeout=10, polling=FAST_POLLING)
    fakegcp.burst(503, count=2, method="GET", path=r"/nodes/n$")
    for _ in range(2):
        with pytest.raises(gexc.ServiceUnavailable) as info:
            v2.get_node(name=name)
        assert info.value.code == 503
    assert v2.get_node(name=name).state == tpu_v2.Node.State.READY

    fakegcp.burst(503, count=1, path="GetNode")       # gRPC calls match on their method path
    with pytest.raises(gexc.ServiceUnavailable):
        v1.get_node(name=name)
    assert v1.get_node(name=name).state == tpu_v1.Node.State.READY


def test_bursts_of_429_and_500_only_hit_matching_calls(fakegcp):
    instances = clients.compute(compute_v1.InstancesClient, fakegcp)
    fakegcp.burst(429, count=1, method="POST", path="/instances$")
    assert list(instances.list(project=fakegcp.project, zone=ZONE)) == []   # a GET: untouched
    with pytest.raises(gexc.TooManyRequests) as info:
        instances.insert(project=fakegcp.project, zone=ZONE, instance_resource=compute_v1.Instance(
            name="vm", machine_type=f"zones/{ZONE}/machineTypes/n1-standard-2"))
    assert info.value.errors[0]["reason"] == "rateLimitExceeded"
    fakegcp.burst(500, count=1)
    with pytest.raises(gexc.InternalServerError):
        instances.list(project=fakegcp.project, zone=ZONE)


@pytest.mark.parametrize("state", ["PREEMPTED", "TERMINATED"])
def test_preemption_is_visible_in_both_apis(fakegcp, v2, v1, state):
    _create_vm(v2, fakegcp).result(timeout=10, polling=FAST_POLLING)
    fakegcp.preempt(ZONE, "n", state=state)
    name = f"{_parent(fakegcp)}/nodes/n"
    assert v2.get_node(name=name).state == tpu_v2.Node.State[state]
    assert v1.get_node(name=name).state == tpu_v1.Node.State[state]
    v2.delete_node(name=name).result(timeout=10, polling=FAST_POLLING)  # a dead node still has to be deleted


def test_unhealthy_node_and_preempted_vm(fakegcp, v2):
    _create_vm(v2, fakegcp).result(timeout=10, polling=FAST_POLLING)
    fakegcp.make_unhealthy(ZONE, "n", health="UNHEALTHY_MAINTENANCE", description="host maintenance")
    node = v2.get_node(name=f"{_parent(fakegcp)}/nodes/n")
    assert node.state == tpu_v2.Node.State.READY
    assert node.health == tpu_v2.Node.Health.UNHEALTHY_MAINTENANCE and node.health_description == "host maintenance"

    instances = clients.compute(compute_v1.InstancesClient, fakegcp)
    instances.insert(project=fakegcp.project, zone=ZONE, instance_resource=compute_v1.Instance(
        name="vm", machine_type=f"zones/{ZONE}/machineTypes/n1-standard-2"))
    fakegcp.preempt(ZONE, "vm", kind="vm")
    assert instances.get(project=fakegcp.project, zone=ZONE, instance="vm").status == "TERMINATED"


def test_quota_at_the_call_carries_a_quota_failure(fakegcp, v2, v1):
    fakegcp.quota("us-central1", count=2, limit=8)
    with pytest.raises(gexc.TooManyRequests) as rest:
        _create_vm(v2, fakegcp)
    assert rest.value.message.endswith(": Quota limit 'TPUV2sPreemptiblePerProjectPerRegionForTPUAPI' has been "
                                       "exceeded. Limit: 8 in region us-central1.")  # prefixed "POST <url>"
    (violation,) = next(d for d in rest.value.details if d["@type"].endswith("QuotaFailure"))["violations"]
    assert violation["quotaMetric"] == "tpu.googleapis.com/TPUV2sPreemptiblePerProjectPerRegionForTPUAPI"

    with pytest.raises(gexc.ResourceExhausted) as grpc_err:
        _create_node(v1, fakegcp)
    (detail,) = grpc_err.value.details
    assert isinstance(detail, error_details_pb2.QuotaFailure)
    assert detail.violations[0].quota_dimensions["region"] == "us-central1"
    assert list(v2.list_nodes(parent=_parent(fakegcp))) == []


def test_quota_in_the_operation(fakegcp, v2):
    fakegcp.quota("us-central1", count=1, metric="TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI", at="operation")
    op = _create_vm(v2, fakegcp)
    with pytest.raises(gexc.ResourceExhausted) as info:
        op.result(timeout=10, polling=FAST_POLLING)
    assert info.value.message == ("Quota 'TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI' exhausted. "
                                  "Limit 0 in region us-central1")
    # api_core drops an operation error's details from the exception; they stay on the operation.
    failure = error_details_pb2.QuotaFailure()
    assert op.operation.error.details[0].Unpack(failure)
    assert failure.violations[0].quota_id == "TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI"


def test_permission_denied_names_the_permission(fakegcp, v2, v1):
    fakegcp.deny("tpu.nodes.create", count=2)
    assert list(v2.list_nodes(parent=_parent(fakegcp))) == []
    with pytest.raises(gexc.Forbidden) as rest:
        _create_vm(v2, fakegcp)
    assert "Permission 'tpu.nodes.create' denied" in rest.value.message
    assert rest.value.reason == "IAM_PERMISSION_DENIED"
    with pytest.raises(gexc.PermissionDenied) as grpc_err:
        _create_node(v1, fakegcp)
    assert grpc_err.value.reason == "IAM_PERMISSION_DENIED"
    assert _create_vm(v2, fakegcp).metadata.verb == "create"


@pytest.mark.parametrize("service", ["tpu", "compute"])
def test_disabled_api(fakegcp, v2, v1, service):
    fakegcp.disable_service(service)
    instances = clients.compute(compute_v1.InstancesClient, fakegcp)
    calls = {"tpu": [lambda: list(v2.list_nodes(parent=_parent(fakegcp))),
                     lambda: list(v1.list_nodes(parent=_parent(fakegcp)))],
             "compute": [lambda: list(instances.list(project=fakegcp.project, zone=ZONE))]}
    for call in calls[service]:
        with pytest.raises(gexc.Forbidden) as info:
            call()
        assert info.value.reason == "SERVICE_DISABLED"
        assert "has not been used in project" in info.value.message
    other = "compute" if service == "tpu" else "tpu"
    for call in calls[other]:
        call()
    fakegcp.enable_service(service)
    for call in calls[service]:
        call()


def test_forced_cidr_conflicts_and_denied_tpu_nodes(fakegcp, v1):
    fakegcp.cidr_conflicts(1)
    with pytest.raises(gexc.InvalidArgument, match="conflicts with another subnet"):
        _create_node(v1, fakegcp, "a").result(timeout=10, polling=FAST_POLLING)
    assert _create_node(v1, fakegcp, "b").result(timeout=10, polling=FAST_POLLING).cidr_block == "10.240.1.0/29"
    fakegcp.deny_tpu_nodes()
    with pytest.raises(gexc.FailedPrecondition, match="migrate to TPU VM"):
        _create_node(v1, fakegcp, "c", "10.240.2.0/29")


def test_call_log_counts_calls_per_api_method(fakegcp, v2, v1):
    _create_vm(v2, fakegcp).result(timeout=10, polling=FAST_POLLING)
    _create_node(v1, fakegcp, "m").result(timeout=10, polling=FAST_POLLING)
    counts = fakegcp.call_counts()
    assert counts["tpu.v2.nodes.create"] == 1 and counts["tpu.v1.nodes.create"] == 1
    assert counts["tpu.v2.operations.get"] >= 1 and counts["tpu.v1.operations.get"] >= 1
    transports = {c["call"]: c["transport"] for c in fakegcp.calls()}
    assert transports["tpu.v1.nodes.create"] == "grpc" and transports["tpu.v2.nodes.create"] == "rest"


def test_operation_polling_delay_slows_only_operation_reads(fakegcp, v2):
    op = _create_vm(v2, fakegcp)
    fakegcp.set_latencies(op_poll=0.4)
    started = time.monotonic()
    v2.get_node(name=f"{_parent(fakegcp)}/nodes/n")
    plain = time.monotonic() - started
    started = time.monotonic()
    op.done()
    polled = time.monotonic() - started
    assert polled >= 0.4 > plain
    with pytest.raises(FakeGCPError, match="Unknown latency"):
        fakegcp.set_latencies(tpu_creat=1)
