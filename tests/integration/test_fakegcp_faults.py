"""Every admin injection, observed the way tpuctl will observe it: through Google's clients."""

from __future__ import annotations

import json as _json
import time
from pathlib import Path

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


@pytest.mark.client_error_reason
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


@pytest.mark.client_error_reason
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


# ---- POST /_admin/fault: any error as Google sends it ---------------------------------------------
CORPUS = _json.loads((Path(__file__).resolve().parents[1] / "corpus" / "google_errors.json").read_text())["entries"]
NODES = r"^/v2/projects/[^/]+/locations/us-central1-b/nodes$"
INSTANCES = r"^/compute/v1/projects/[^/]+/zones/us-central1-b/instances$"
RATE_BODY = {"error": {
    "code": 429, "status": "RESOURCE_EXHAUSTED",
    "message": "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of service "
               "'tpu.googleapis.com' for consumer 'project_number:1'.",
    "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
                 "domain": "googleapis.com", "metadata": {"service": "tpu.googleapis.com"}}]}}


@pytest.mark.client_error_reason
def test_a_call_fault_answers_the_body_verbatim_for_count_calls(fakegcp, v2):
    fakegcp.fault("tpu.v2", NODES, RATE_BODY, count=2)
    listed = fakegcp.faults()["faults"]
    assert [(f["api"], f["method"], f["where"], f["status"], f["remaining"]) for f in listed] == \
        [("tpu.v2", "POST", "call", 429, 2)]
    for _ in range(2):
        with pytest.raises(gexc.TooManyRequests) as info:
            _create_vm(v2, fakegcp)
        assert info.value.response.json() == RATE_BODY and info.value.reason == "RATE_LIMIT_EXCEEDED"
    assert _create_vm(v2, fakegcp).metadata.verb == "create"
    assert fakegcp.faults()["faults"] == []
    # other zones, methods and APIs are not touched
    fakegcp.fault("tpu.v2", NODES, RATE_BODY, count=None)
    elsewhere = v2.create_node(parent=f"projects/{fakegcp.project}/locations/us-central1-c", node_id="x",
                               node=tpu_v2.Node(accelerator_type="v2-8", runtime_version=RUNTIME))
    assert elsewhere.metadata.verb == "create"
    assert list(v2.list_nodes(parent=_parent(fakegcp)))
    fakegcp.reset()
    assert fakegcp.faults()["faults"] == []


def test_an_operation_fault_fails_the_operation_and_leaves_no_node(fakegcp, v2):
    body = {"error": {"code": 9, "message": "Insufficient reserved capacity. Contact customer support to increase "
                                            "your reservation. [EID: 0x2f8bc266e74261a]"}}
    fakegcp.fault("tpu.v2", NODES, body, where="operation")
    op = _create_vm(v2, fakegcp, "a")
    with pytest.raises(gexc.FailedPrecondition, match="Insufficient reserved capacity"):
        op.result(timeout=10, polling=FAST_POLLING)
    assert op.operation.error.code == 9
    assert [n["name"].rsplit("/", 1)[-1] for n in fakegcp.resources()["nodes"]] == []
    assert _create_vm(v2, fakegcp, "b").result(timeout=10, polling=FAST_POLLING).state == tpu_v2.Node.State.READY


@pytest.mark.client_error_reason
def test_a_fault_reaches_the_v1_grpc_service_with_its_details(fakegcp, v1):
    body = {"error": {"code": 403, "status": "PERMISSION_DENIED",
                      "message": "Location us-central1-b is not found or access is unauthorized.",
                      "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                   "reason": "LOCATION_POLICY_VIOLATED", "domain": "googleapis.com"},
                                  {"@type": "type.googleapis.com/unknown.Detail", "x": 1}]}}
    fakegcp.fault("tpu.v1", r"^/v1/projects/[^/]+/locations/us-central1-b/nodes$", body)
    with pytest.raises(gexc.PermissionDenied) as info:
        _create_node(v1, fakegcp)
    assert info.value.grpc_status_code.value[0] == 7 and info.value.reason == "LOCATION_POLICY_VIOLATED"
    assert "is not found or access is unauthorized" in info.value.message
    fakegcp.fault("tpu.v1", r"/nodes$", {"error": {"code": 8, "message": 'There is no more capacity in the zone '
                                                                        '"us-central1-b"'}}, where="operation")
    with pytest.raises(gexc.ResourceExhausted, match="no more capacity"):
        _create_node(v1, fakegcp, "m").result(timeout=10, polling=FAST_POLLING)


def test_compute_faults_on_the_call_and_on_the_operation(fakegcp):
    instances = clients.compute(compute_v1.InstancesClient, fakegcp)
    operations = clients.compute(compute_v1.ZoneOperationsClient, fakegcp)
    rate = {"error": {"code": 403, "message": "Rate Limit Exceeded",
                      "errors": [{"message": "Rate Limit Exceeded", "domain": "usageLimits",
                                  "reason": "rateLimitExceeded"}]}}
    fakegcp.fault("compute.v1", INSTANCES, rate)

    def insert(name):
        return instances.insert(project=fakegcp.project, zone=ZONE, instance_resource=compute_v1.Instance(
            name=name, machine_type=f"zones/{ZONE}/machineTypes/n1-standard-2"))

    with pytest.raises(gexc.Forbidden) as info:
        insert("a")
    assert info.value.errors[0]["reason"] == "rateLimitExceeded"
    quota = {"error": {"errors": [{"code": "QUOTA_EXCEEDED",
                                   "message": "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1."}]},
             "httpErrorStatusCode": 403, "httpErrorMessage": "FORBIDDEN"}
    fakegcp.fault("compute.v1", INSTANCES, quota, where="operation")
    op = insert("b")
    done = operations.wait(project=fakegcp.project, zone=ZONE, operation=op.name)
    assert done.error.errors[0].code == "QUOTA_EXCEEDED" and done.http_error_status_code == 403
    assert "b" not in [i["name"] for i in fakegcp.resources()["instances"]]


@pytest.mark.parametrize("bad, why", [
    ({"api": "tpu.v3", "path": "x", "body": {"error": {}}, "status": 400}, "'api' must be"),
    ({"api": "tpu.v2", "path": "(", "body": {"error": {}}, "status": 400}, "not a valid regex"),
    ({"api": "tpu.v2", "path": "x", "body": {"message": "m"}, "status": 400}, "'body' must be"),
    ({"api": "tpu.v2", "path": "x", "body": {"error": {"code": 8}}}, "needs 'status'"),
    ({"api": "tpu.v2", "path": "x", "body": {"error": {}}, "where": "later", "status": 400}, "'where' must be"),
    ({"api": "tpu.v2", "path": "x", "body": {"error": {}}, "status": 200}, "'status' must be"),
    ({"api": "tpu.v2", "path": "x", "body": {"error": {}}, "status": 400, "count": 0}, "'count' must be"),
])
def test_bad_fault_requests_are_refused_in_one_line(fakegcp, bad, why):
    with pytest.raises(FakeGCPError, match=why):
        fakegcp.admin("POST", "fault", bad)


@pytest.mark.client_error_reason
def test_canned_faults_use_google_texts(fakegcp, v2):
    fakegcp.burst(429, count=1, path="/nodes$")
    with pytest.raises(gexc.TooManyRequests) as info:
        _create_vm(v2, fakegcp)
    assert info.value.reason == "RATE_LIMIT_EXCEEDED"
    assert info.value.message.endswith("Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' "
                                       f"of service 'tpu.googleapis.com' for consumer 'project_number:"
                                       f"{info.value.response.json()['error']['details'][0]['metadata']['consumer'].split('/')[1]}'.")
    fakegcp.quota("us-central1", count=1, at="operation", zone=ZONE, limit=32)
    with pytest.raises(gexc.ResourceExhausted) as info:
        _create_vm(v2, fakegcp, "z").result(timeout=10, polling=FAST_POLLING)
    assert info.value.message == f"Quota 'TPUV2sPreemptiblePerProjectPerZoneForTPUAPI' exhausted. Limit 32 in zone {ZONE}"
    fakegcp.stockout(ZONE, count=1, kind="vm")
    instances = clients.compute(compute_v1.InstancesClient, fakegcp)
    operations = clients.compute(compute_v1.ZoneOperationsClient, fakegcp)
    op = instances.insert(project=fakegcp.project, zone=ZONE, instance_resource=compute_v1.Instance(
        name="vm", machine_type=f"zones/{ZONE}/machineTypes/n1-standard-2"))
    done = operations.wait(project=fakegcp.project, zone=ZONE, operation=op.name)
    [err] = done.error.errors
    assert err.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert [d.error_info.reason for d in err.error_details if d.error_info.reason] == ["resource_availability"]


def _replayable(e):
    return e["where"] != "call" or e["http_status"]


REPLAY = [e for e in CORPUS if _replayable(e)]


@pytest.mark.parametrize("entry", REPLAY, ids=[e["id"] for e in REPLAY])
def test_corpus_replayed_through_tpuctl_gcp_provider(fakegcp_env, entry):
    """Each real response, served by the fake where Google served it (the call or the operation;
    the operation where the source does not say), read by tpuctl's GCP provider over the wire."""
    from provision.basics.errors import CloudError
    from provision.cloud.base import ClusterSpec
    from provision.cloud.failures import classify
    from provision.cloud.gcp import GcpProvider

    fake = fakegcp_env
    fake.set_latencies(tpu_create=0.05, vm_create=0.05)
    compute = entry["api"] == "compute.v1"
    where = entry["where"] or "operation"
    expect = entry["expect"]
    rate = expect["kind"] in ("rate_limit", "transient")
    fake.fault("compute.v1" if compute else "tpu.v2", INSTANCES if compute else NODES, entry["body"],
               where=where, status=entry["http_status"] if where == "call" else None)
    provider = GcpProvider(fake.project)
    spec = ClusterSpec(name="replay", accelerator_type="v2-8", zones=(ZONE,), provider="gcp", project=fake.project,
                       machine_type="e2-standard-2", runtime_version=RUNTIME)   # what up would have chosen
    create = (lambda: provider.create_vm(spec, ZONE)) if compute else (lambda: provider.create_tpu(spec, ZONE, None))
    if where == "call":
        if rate:     # retried with backoff: the fault hits once, the retry succeeds
            create()
            counts = fake.call_counts()
            assert counts["compute.instances.insert" if compute else "tpu.v2.nodes.create"] == 2
            return
        with pytest.raises(CloudError) as info:
            create()
        assert info.value.kind == expect["kind"], info.value
        return
    op = create()
    deadline = time.monotonic() + 20
    while not op.done and time.monotonic() < deadline:
        op = provider.poll(op)
        time.sleep(0.05)
    assert op.done and op.error is not None
    f = classify(code=op.error.code, message=op.error.message, where="operation")
    assert (f.kind.value, f.scope.value) == (expect["kind"], expect["scope"]), op.error
    if expect.get("zones_available"):
        assert list(f.zones_available) == expect["zones_available"]
