"""One place classifies cloud errors; zone failover acts on the class only.

The corpus (tests/corpus/google_errors.json) holds real error responses, each quoted from a public
source; every one must be read as its ``expect`` says, from the JSON body (as the REST clients
carry it) and, for operations, from what tpuctl keeps of an operation error (code and message).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from google.api_core import exceptions as gexc

from provision.cloud.failures import Kind, Scope, classify, classify_body, failure, scope_of
from provision.cloud.gcp_errors import compute_operation_failure, failure_of, retriable
from provision.cluster.failover import ZonePlan

CORPUS = json.loads((Path(__file__).resolve().parents[1] / "corpus" / "google_errors.json").read_text())
ENTRIES = CORPUS["entries"]

CIDR_MSG = ('Error code 3 ... The \'CIDR Range\' value "10.2.0.0/29" on network default conflicts with another '
            'subnet or object in the (peered) customer network')


def test_the_corpus_is_real_and_large_enough():
    assert len(ENTRIES) >= 30
    ids = [e["id"] for e in ENTRIES]
    assert len(set(ids)) == len(ids)
    for e in ENTRIES:
        assert e["source"].startswith("https://"), e["id"]
        assert e["quote"].strip(), e["id"]
        assert e["where"] in ("call", "operation", None), e["id"]
        assert isinstance(e["body"].get("error"), dict), e["id"]
        assert e["envelope"] in ("verbatim", "reconstructed"), e["id"]
    situations = {e["expect"]["kind"] for e in ENTRIES}
    assert {"rate_limit", "stockout", "zone_unavailable", "zone_quota", "quota", "global_quota",
            "permission", "api_disabled", "invalid"} <= situations


def _words(text: str) -> str:
    return " ".join(text.replace("\\n", " ").replace("#", " ").split())


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_corpus_entry_is_read_as_google_meant(entry):
    f = classify_body(entry["body"], http_status=entry["http_status"], where=entry["where"])
    expect = entry["expect"]
    assert (f.kind.value, f.scope.value) == (expect["kind"], expect["scope"]), f
    assert f.scope == scope_of(f.kind)
    if "zones_available" in expect:
        assert list(f.zones_available) == expect["zones_available"]
    # the body carries the quoted text (whitespace and comment marks aside)
    err = entry["body"]["error"]
    said = err.get("message") or (err.get("errors") or [{}])[0].get("message", "")
    assert _words(said.split(" [EID")[0])[:60] in _words(entry["quote"]), entry["id"]


OPERATIONS = [e for e in ENTRIES if e["where"] in ("operation", None)
              and e["expect"]["kind"] not in ("rate_limit",)]


@pytest.mark.parametrize("entry", OPERATIONS, ids=[e["id"] for e in OPERATIONS])
def test_an_operation_error_reads_the_same_from_code_and_message(entry):
    """tpuctl keeps (code, message) of a failed operation: that alone must classify the same way."""
    body = entry["body"]
    err = body["error"]
    if err.get("errors"):
        code, message = compute_operation_failure(body)       # a Compute operation, as JSON
    else:
        code = err.get("code") if isinstance(err.get("code"), int) and err["code"] < 100 else None
        message = err.get("message", "")
    f = classify(code=code, message=message, where="operation")
    assert (f.kind.value, f.scope.value) == (entry["expect"]["kind"], entry["expect"]["scope"]), (code, message)
    if entry["expect"].get("zones_available"):
        assert list(f.zones_available) == entry["expect"]["zones_available"]


def _http_error(status: int, body: dict) -> gexc.GoogleAPICallError:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(body).encode()
    response.request = requests.Request("POST", "https://tpu.googleapis.com/v2/projects/p/locations/z/nodes").prepare()
    return gexc.from_http_response(response)


CALLS = [e for e in ENTRIES if e["where"] == "call" and e["http_status"]]


@pytest.mark.parametrize("entry", CALLS, ids=[e["id"] for e in CALLS])
def test_a_call_error_reads_the_same_through_api_core(entry):
    """The REST paths raise google-api-core's exception for the response: its body decides."""
    exc = _http_error(entry["http_status"], entry["body"])
    f = failure_of(exc)
    assert (f.kind.value, f.scope.value) == (entry["expect"]["kind"], entry["expect"]["scope"])
    assert retriable(exc) == (entry["expect"]["kind"] in ("rate_limit", "transient"))
    assert not f.message.startswith("POST "), f.message


def test_grpc_errors_read_their_unpacked_details():
    from google.rpc import error_details_pb2

    info = error_details_pb2.ErrorInfo(reason="RATE_LIMIT_EXCEEDED", domain="googleapis.com")
    exc = gexc.ResourceExhausted("Quota exceeded for quota metric 'Requests' and limit 'Requests per minute'",
                                 details=[info], error_info=info)
    assert failure_of(exc).kind == Kind.RATE_LIMIT and retriable(exc)
    violation = error_details_pb2.QuotaFailure.Violation(
        subject="quota/TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI",
        description="Quota 'TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI' exhausted. Limit 32 in zone europe-west4-a")
    quota = error_details_pb2.QuotaFailure(violations=[violation])
    exc = gexc.ResourceExhausted("Quota exceeded", details=[quota])
    f = failure_of(exc)
    assert (f.kind, f.scope) == (Kind.ZONE_QUOTA, Scope.ZONE) and not retriable(exc)
    exc = gexc.PermissionDenied("Location us-east1-d is not found or access is unauthorized.")
    assert failure_of(exc).kind == Kind.ZONE_UNAVAILABLE


def test_compute_operation_errors_from_json_and_from_client_objects():
    from google.cloud.compute_v1 import types

    error = {"errors": [{"code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1."}]}
    as_json = compute_operation_failure({"error": error, "httpErrorStatusCode": 403})
    as_error = compute_operation_failure(error)
    op = types.Operation(error=types.Error(errors=[types.Errors(code="QUOTA_EXCEEDED",
                                                                 message=error["errors"][0]["message"])]))
    as_object = compute_operation_failure(op)
    for code, message in (as_json, as_error, as_object):
        f = classify(code=code, message=message)
        assert (f.kind, f.scope) == (Kind.QUOTA, Scope.REGION), message
    assert compute_operation_failure({"httpErrorStatusCode": 503, "httpErrorMessage": "SERVICE UNAVAILABLE"})[0] == 14
    assert compute_operation_failure({})[0] == 2


@pytest.mark.parametrize("kw, kind, scope", [
    ({"http_status": 429, "message": "Rate Limit Exceeded"}, Kind.RATE_LIMIT, Scope.CALL),
    ({"http_status": 403, "message": "Rate Limit Exceeded", "errors": [{"reason": "rateLimitExceeded"}]},
     Kind.RATE_LIMIT, Scope.CALL),
    ({"http_status": 503, "message": "Service Unavailable"}, Kind.TRANSIENT, Scope.CALL),
    ({"http_status": 500, "message": "Internal error"}, Kind.TRANSIENT, Scope.CALL),
    ({"code": 4, "message": "Deadline exceeded"}, Kind.TRANSIENT, Scope.CALL),
    ({"code": 3, "message": "Cloud TPU was unable to complete the operation. Please try again."}, Kind.TRANSIENT,
     Scope.CALL),
    ({"code": 8, "message": 'There is no more capacity in the zone "us-central1-b"'}, Kind.STOCKOUT, Scope.ZONE),
    ({"code": 8, "message": "ZONE_RESOURCE_POOL_EXHAUSTED"}, Kind.STOCKOUT, Scope.ZONE),
    ({"code": 8, "message": "Quota 'TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI' exceeded in region us-central1"},
     Kind.QUOTA, Scope.REGION),
    ({"http_status": 429, "message": "Quota exceeded", "details": [{
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [{"quotaId": "TPUV2sPreemptiblePerProjectPerZoneForTPUAPI",
                        "quotaDimensions": {"zone": "europe-west4-a"}}]}]}, Kind.ZONE_QUOTA, Scope.ZONE),
    ({"code": 3, "message": CIDR_MSG}, Kind.CIDR_CONFLICT, Scope.CALL),
    ({"code": 7, "message": "Permission 'tpu.nodes.create' denied on 'projects/p/locations/z'"}, Kind.PERMISSION,
     Scope.CLOUD),
    ({"http_status": 403, "reason": "SERVICE_DISABLED",
          "message": "Cloud TPU API has not been used in project p before or it is disabled"}, Kind.API_DISABLED,
     Scope.CLOUD),
    ({"http_status": 403, "reason": "LOCATION_POLICY_VIOLATED", "message": "Location policy violated"},
     Kind.ZONE_UNAVAILABLE, Scope.ZONE),
    ({"code": 6, "message": "already exists"}, Kind.EXISTS, Scope.CALL),
    ({"code": 3, "message": "Invalid accelerator type"}, Kind.INVALID, Scope.CLOUD),
])
def test_classification(kw, kind, scope):
    f = classify(**kw)
    assert (f.kind, f.scope) == (kind, scope)


def test_every_kind_has_one_scope_and_strings_map_back():
    for kind in Kind:
        assert failure(kind.value, "m").scope == scope_of(kind)
    assert failure("conflict", "m").kind == Kind.UNKNOWN and scope_of("nonsense") == Scope.CLOUD
    assert failure(Kind.RATE_LIMIT, "m").retriable and failure(Kind.TRANSIENT, "m").retriable
    assert not failure(Kind.QUOTA, "m").retriable


def test_permission_hint_names_the_role():
    f = classify(code=7, message="Permission 'tpu.nodes.create' denied")
    assert "roles/tpu.admin" in f.hint and "tpu.nodes.create" in f.hint
    f = classify(code=7, message="Required 'compute.instances.create' permission for 'projects/p'")
    assert "roles/compute.instanceAdmin.v1" in f.hint
    f = classify(http_status=403, message="cannot create a TPU Node on a project linked to a free-trial billing account")
    assert "billing account" in f.hint


def test_disabled_api_hint_names_the_api():
    f = classify(http_status=403, message="Compute Engine API has not been used ... compute.googleapis.com")
    assert f.hint == "enable it: gcloud services enable compute.googleapis.com"


def test_quota_hints_say_where_and_what():
    f = classify(code=8, message="Quota 'TPUV2sPreemptiblePodPerProjectPerZoneForTPUAPI' exhausted. Limit 32 in zone "
                                 "europe-west4-a")
    assert "europe-west4-a" in f.hint and "next zone" in f.hint
    f = classify(code=8, message="Quota 'CPUS_ALL_REGIONS' exceeded.  Limit: 32.0 globally.")
    assert f.kind == Kind.GLOBAL_QUOTA and "no zone can help" in f.hint


def test_failover_skips_stocked_out_zones_and_quota_regions():
    plan = ZonePlan(("us-central1-b", "us-central1-c", "europe-west4-a", "europe-west4-b"))
    plan.record("us-central1-b", classify(code=8, message="no more capacity in the zone"))
    assert plan.next_zone() == "us-central1-c"
    plan.record("us-central1-c", classify(code=8, message="Quota exceeded in region us-central1"))
    assert plan.next_zone() == "europe-west4-a"
    plan.record("europe-west4-a", classify(code=7, message="Permission 'tpu.nodes.create' denied"))
    assert plan.next_zone() is None and plan.stopped.kind == Kind.PERMISSION
    assert "us-central1-b: stockout" in plan.explain() and "region us-central1: quota" in plan.explain()


def test_failover_on_zone_quota_and_unserved_zones_keeps_the_region():
    plan = ZonePlan(("us-central1-b", "us-central1-c", "europe-west4-a"))
    plan.record("us-central1-b", classify(code=8, message="Quota 'X' exhausted. Limit 32 in zone us-central1-b"))
    assert plan.next_zone() == "us-central1-c"
    plan.record("us-central1-c", classify(http_status=403, message="Location us-central1-c is not found or access "
                                                                   "is unauthorized."))
    assert plan.next_zone() == "europe-west4-a"
    plan.record("europe-west4-a", classify(code=8, message="Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 1.0 globally."))
    assert plan.next_zone() is None and plan.stopped.kind == Kind.GLOBAL_QUOTA


def test_failover_uses_zones_available():
    plan = ZonePlan(("us-central1-b", "us-central1-c", "us-central1-f", "europe-west4-a"))
    f = classify_body({"error": {"errors": [{
        "code": "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "message": "The zone ... does not have enough resources",
        "errorDetails": [{"errorInfo": {"reason": "resource_availability",
                                        "metadatas": {"zonesAvailable": "us-central1-a,us-central1-f"}}}]}]}})
    plan.record("us-central1-b", f)
    assert plan.next_zone() == "us-central1-f"          # named as having capacity; us-central1-c is not
    assert "us-central1-c" in plan.blocked_zones
    empty = classify_body({"error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "m", "errorDetails": [
        {"errorInfo": {"reason": "resource_availability", "metadatas": {"zonesAvailable": ""}}}]}]}})
    plan = ZonePlan(("us-central1-b", "us-central1-c"))
    plan.record("us-central1-b", empty)
    assert plan.next_zone() == "us-central1-c"           # an empty list says nothing about the others


def test_storage_hints_name_bucket_level_roles_not_storage_admin():
    from provision.cloud.failures import role_for

    assert role_for("storage.objects.create").startswith("roles/storage.objectUser")
    assert role_for("storage.buckets.get").startswith("roles/storage.legacyBucketReader")
    assert role_for("storage.buckets.setIamPolicy").startswith("roles/storage.admin")
    assert role_for("compute.projects.setCommonInstanceMetadata") == "roles/compute.instanceAdmin.v1"


# ---- Google's texts that read like one failure and are another ------------------------------
BARE_429 = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                      "status": "RESOURCE_EXHAUSTED"}}     # tests/corpus: genai-bare-429-python-genai-2065


def test_a_bare_resource_exhausted_is_retried_not_a_regions_quota():
    """Google's default RESOURCE_EXHAUSTED text says "check quota" and names none: throttling until it
    says which quota; as a call (429) and as an operation (code 8) alike."""
    for f in (classify_body(BARE_429, http_status=429, where="call"),
              classify(code=8, message=BARE_429["error"]["message"], where="operation")):
        assert (f.kind, f.scope) == (Kind.RATE_LIMIT, Scope.CALL) and f.retriable, f
        assert "named no quota" in f.hint
    assert retriable(_http_error(429, BARE_429))
    # a quota that is named is still a quota, whatever else the text says
    named = classify(code=8, message="Resource has been exhausted (e.g. check quota). Quota 'TPUV2sPreemptiblePod"
                                     "PerProjectPerRegionForTPUAPI' exhausted. Limit 32 in region us-central1")
    assert (named.kind, named.scope) == (Kind.QUOTA, Scope.REGION)


def test_a_provisioning_model_not_offered_in_a_zone_moves_on():
    f = classify(code=3, message='FLEX_START provisioning model is not supported for accelerator type "v6e-1" in '
                                 'location "asia-east1-c"', where="operation")
    assert (f.kind, f.scope) == (Kind.ZONE_UNAVAILABLE, Scope.ZONE) and "provisioning model" in f.hint


def test_reservation_not_found_for_a_request_that_names_none_moves_to_the_next_zone():
    """An on-demand TPU VM create in us-east5-a ended NOT_FOUND "Reservation not found" (reported as
    gcloud compute tpus tpu-vm create's output; its body is not in a public source, tests/corpus/README.md).
    tpuctl names no reservation, so that zone cannot serve the request: the next zone, as a stockout."""
    f = classify(code=5, message="Reservation not found", where="operation")
    assert (f.kind, f.scope) == (Kind.ZONE_UNAVAILABLE, Scope.ZONE)
    assert "names no reservation" in f.hint and "next zone" in f.hint
    # as a FAILED queued resource carries it, and as tpuctl keeps it with another code
    assert classify(code=9, message="Reservation not found", where="operation").scope == Scope.ZONE
    # anything else missing from a create stops: no zone has the network the request names
    other = classify(code=5, message="The resource 'projects/p/global/networks/n' was not found", where="operation")
    assert (other.kind, other.scope) == (Kind.INVALID, Scope.CLOUD) and "network" in other.hint
    # a call's 404 is still "gone" (a delete of what is gone, a get): the caller decides
    assert classify(code=5, message="Resource 'projects/p/locations/z/nodes/n' was not found").kind == Kind.NOT_FOUND


def _entry(entry_id: str) -> dict:
    return next(e for e in ENTRIES if e["id"] == entry_id)


def test_a_machine_type_the_zone_lacks_moves_the_host_vm_to_the_next_zone():
    e = _entry("compute-machine-type-not-in-zone-terratest-1132")
    f = classify_body(e["body"], http_status=400, where="call")
    assert (f.kind, f.scope) == (Kind.ZONE_UNAVAILABLE, Scope.ZONE)
    assert f.hint == "zone europe-west8-a has no machine type f1-micro: tpuctl tries the next zone of --zone"
    # through google-api-core, as the REST call raises it
    assert failure_of(_http_error(400, e["body"])).scope == Scope.ZONE


def test_a_refused_firewall_rule_names_the_role_that_carries_the_permission():
    e = _entry("compute-firewall-permission-403-bosh-google-cpi-118")
    f = classify_body(e["body"], http_status=403, where="call")
    assert f.kind == Kind.PERMISSION
    assert f.hint == ("grant roles/compute.securityAdmin (it carries compute.firewalls.create) to the account "
                      "tpuctl runs as")
    from provision.cloud.failures import role_for

    assert role_for("compute.firewalls.delete") == role_for("compute.networks.updatePolicy") \
        == "roles/compute.securityAdmin"
    assert role_for("compute.firewalls.list") == "roles/compute.networkViewer"   # up's check only reads


def test_a_disabled_billing_api_says_how_to_enable_it_in_the_price_note():
    """The price note quoted Google's text cut at 160 characters, before "Enable it by visiting"."""
    from provision.cloud.gcp_billing import reason_of

    e = _entry("billing-disabled-403-k8s-config-connector-187")
    reason = reason_of(_http_error(403, e["body"]))
    assert reason == ("Cloud Billing API has not been used in project XXXXXXXXX before or it is disabled; "
                      "enable it: gcloud services enable cloudbilling.googleapis.com")


def test_a_failed_queued_resource_without_a_reason_is_its_zones_not_a_rate_limit():
    from provision.cloud.gcp_errors import queued_failure

    for state in ({"state": "FAILED"}, {"state": "FAILED", "failedData": {}},
                  {"state": "FAILED", "failedData": {"error": {}}}):
        code, message = queued_failure("qr", state)
        f = classify(code=code, message=message, where="operation")
        assert (f.kind, f.scope) == (Kind.REQUEST_FAILED, Scope.ZONE), (state, message)
        assert "without saying why" in f.hint and "qr" in message
    # with Google's words, the words decide
    code, message = queued_failure("qr", {"state": "FAILED", "failedData": {"error": {
        "code": 8, "message": 'There is no more capacity in the zone "us-central1-b"'}}})
    assert classify(code=code, message=message, where="operation").kind == Kind.STOCKOUT
    code, message = queued_failure("qr", {"state": "FAILED", "failedData": {"error": {
        "code": 3, "message": 'FLEX_START provisioning model is not supported for accelerator type "v6e-1" in '
                              'location "us-central1-b"'}}})
    assert classify(code=code, message=message, where="operation").kind == Kind.ZONE_UNAVAILABLE
    code, message = queued_failure("qr", {"state": "SUSPENDED"})
    assert classify(code=code, message=message, where="operation").kind != Kind.RATE_LIMIT


def test_a_missing_scope_is_not_a_missing_role():
    f = classify_body(next(e for e in ENTRIES if e["id"] == "scope-insufficient-403-analog-296")["body"],
                      http_status=403, where="call")
    assert f.kind == Kind.PERMISSION and "cloud-platform scope" in f.hint and "roles/" not in f.hint
    f = classify(http_status=403, message="Permission 'monitoring.timeSeries.list' denied on resource "
                                          "'//monitoring.googleapis.com/projects/p' (or it may not exist).")
    assert "roles/monitoring.viewer" in f.hint


def test_failover_says_which_zones_were_asked():
    plan = ZonePlan(("us-central1-b", "us-central1-c", "europe-west4-a"))
    plan.record("us-central1-b", classify(code=8, message="Quota 'X' exhausted. Limit 8 in region us-central1"))
    assert plan.next_zone() == "europe-west4-a"
    plan.record("europe-west4-a", classify(code=5, message="The resource 'projects/p/global/networks/n' was "
                                                   "not found", where="operation"))
    assert plan.next_zone() is None and plan.stopped.kind == Kind.INVALID
    assert plan.tried == ["us-central1-b", "europe-west4-a"] and plan.untried() == ["us-central1-c"]
    assert "europe-west4-a: invalid" in plan.explain()
    assert ZonePlan(("us-central1-b",)).explain() == "no zone tried"
