"""`tpuctl up` against errors as Google sends them, injected through ``POST /_admin/fault``.

Every situation of tests/corpus, served where Google serves it (the create call or its
long-running operation), to the installed ``tpuctl`` run as a subprocess over the wire:
``tpuctl up NAME --zone us-central1-b,us-central1-c,europe-west4-a`` retries, moves to the next
zone, skips the region, or stops with one line that names the fix, leaving nothing billed behind.
The bodies are the corpus's real ones, with their zone and region names moved to the test's zones.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl_process

ZONES = "us-central1-b,us-central1-c,europe-west4-a"
NODES = r"^/v2/projects/[^/]+/locations/{zone}/nodes$"
QUEUED = r"^/v2/projects/[^/]+/locations/{zone}/queuedResources$"
TYPES = r"^/v2/projects/[^/]+/locations/{zone}/acceleratorTypes/"
INSTANCES = r"^/compute/v1/projects/[^/]+/zones/{zone}/instances$"
CORPUS = {e["id"]: e for e in
          json.loads((Path(__file__).resolve().parents[1] / "corpus" / "google_errors.json").read_text())["entries"]}


def body_of(entry_id: str, **renames: str) -> dict:
    """A corpus entry's body, with place names renamed (``europe_west4_a="us-central1-b"``)."""
    text = json.dumps(copy.deepcopy(CORPUS[entry_id]["body"]))
    for old, new in renames.items():
        text = text.replace(old.replace("_", "-"), new)
    return json.loads(text)


@pytest.fixture
def fake(fakegcp_env):
    fakegcp_env.set_latencies(tpu_create=0.15, tpu_delete=0.1, vm_create=0.15, vm_delete=0.1)
    return fakegcp_env


def up(name: str, *extra: str):
    return run_tpuctl_process("up", name, "--zone", ZONES, *extra, timeout=240)


def nodes(fake) -> list[tuple[str, str]]:
    return sorted((n["zone"], n["name"].rsplit("/", 1)[-1]) for n in fake.resources()["nodes"])


def instances(fake) -> list[tuple[str, str]]:
    return sorted((i["zone"].rsplit("/", 1)[-1], i["name"]) for i in fake.resources()["instances"])


def error_line(r) -> str:
    lines = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert len(lines) == 1, r.err
    return lines[0]


def creates(fake, call: str = "tpu.v2.nodes.create") -> int:
    return fake.call_counts().get(call, 0)


def queued(fake) -> list[tuple[str, str]]:
    return sorted((q["name"].split("/")[3], q["name"].rsplit("/", 1)[-1]) for q in fake.resources()["queuedResources"])


# ---- retried ----------------------------------------------------------------------------------------
def test_a_rate_limited_tpu_create_is_retried_with_backoff(fake):
    fake.fault("tpu.v2", NODES.format(zone="us-central1-b"), body_of("speech-rate-grpc-google-cloud-java-7219"),
               count=2)
    r = up("rate", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-b"
    assert creates(fake) == 3 and nodes(fake) == [("us-central1-b", "rate")]


@pytest.mark.parametrize("where", ["call", "operation"])
def test_a_bare_resource_exhausted_is_retried_in_the_same_zone(fake, where):
    """A 429 RESOURCE_EXHAUSTED whose only words are Google's default "Resource has been exhausted
    (e.g. check quota)." names no quota: asked again (with backoff) where it was, not a skipped region."""
    body = body_of("genai-bare-429-python-genai-2065")
    if where == "operation":      # the same google.rpc.Status as a long-running operation carries it
        body = {"error": {"code": 8, "message": body["error"]["message"]}}
    fake.fault("tpu.v2", NODES.format(zone="us-central1-b"), body, where=where,
               status=429 if where == "call" else None, count=2 if where == "call" else 1)
    r = up("bare", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-b"
    assert creates(fake) == (3 if where == "call" else 2) and nodes(fake) == [("us-central1-b", "bare")]
    assert "region us-central1" not in r.err and "moving on" not in r.err


def test_computes_403_rate_limit_is_retried_not_a_missing_permission(fake):
    fake.fault("compute.v1", INSTANCES.format(zone="us-central1-b"), body_of("compute-rate-403-terraform-8360-a"),
               status=403, count=2)
    r = up("crate", "--json")
    assert r.code == 0, r.err
    assert r.json()["vm"]["zone"].endswith("us-central1-b")
    assert creates(fake, "compute.instances.insert") == 3


def test_a_transient_operation_error_is_asked_again_in_the_same_zone(fake):
    fake.fault("tpu.v2", NODES.format(zone="us-central1-b"),
               {"error": {"code": 13, "message": "Internal error encountered."}}, where="operation")
    r = up("again", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-b" and creates(fake) == 2
    assert "asking again for TPU again in us-central1-b" in r.err


# ---- next zone ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry_id, where", [
    ("tpu-stockout-terraform-21243", "operation"),                  # "There is no more capacity in the zone"
    ("tpu-reserved-code9-skypilot-handler", "operation"),           # "Insufficient reserved capacity", code 9
    ("tpu-reserved-code8-skypilot-4579", "operation"),              # the same with code 8, no reservation
    ("tpu-preempted-while-created-skypilot-handler", "operation"),  # code 3: preempted while being created
    ("tpu-quota-zone-skypilot-handler", "operation"),               # "... Limit 32 in zone ...": that zone only
    ("tpu-location-403-skypilot-2269", "call"),                     # 403 "Location ... is not found ..."
    ("tpu-flex-start-not-in-zone-gemma4-dev", "operation"),         # "... is not supported for accelerator type"
])
def test_a_zone_failure_moves_to_the_next_zone_of_the_same_region(fake, entry_id, where):
    body = body_of(entry_id, us_central1_c="us-central1-b", europe_west4_a="us-central1-b",
                   us_east1_d="us-central1-b")
    fake.fault("tpu.v2", NODES.format(zone="us-central1-b"), body, where=where,
               status=CORPUS[entry_id]["http_status"] if where == "call" else None)
    r = up("nz", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-c"
    assert "moving on to zone us-central1-c" in r.err
    assert nodes(fake) == [("us-central1-c", "nz")], "nothing is left in the failed zone"


@pytest.mark.parametrize("entry_id", ["tpu-flex-start-not-in-zone-gemma4-dev", None])
def test_a_failed_queued_resource_moves_to_the_next_zone(fake, entry_id):
    """A queued resource that ends FAILED: with Google's words ("FLEX_START provisioning model is not
    supported for accelerator type ... in location ...") or with none at all (``failedData`` without
    a message; the API reference's FAILED: "a late-discovered problem with the request itself, or ...
    unavailability of resources"), its zone did not grant it: deleted, and the next zone asked. Before
    2026-11 the silent one was read as a rate limit and asked again where it had failed."""
    body = body_of(entry_id) if entry_id else {"error": {}}
    fake.fault("tpu.v2", QUEUED.format(zone="us-central1-b"), body, where="operation")
    r = up("qf", "--no-vm", "--queued", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-c"
    assert "moving on to zone us-central1-c" in r.err
    assert ("zone_unavailable" if entry_id else "request_failed") in r.err
    assert creates(fake, "tpu.v2.queuedResources.create") == 2
    assert queued(fake) == [("us-central1-c", "qf")], "the FAILED request was deleted, not left holding quota"


def test_reservation_not_found_for_an_on_demand_create_moves_to_the_next_zone(fake):
    """An on-demand TPU VM create whose operation ends NOT_FOUND "Reservation not found" (reported as the
    output of gcloud compute tpus tpu-vm create in us-east5-a; its body is not in a public source, so not
    in tests/corpus). tpuctl asks for no reservation: that zone cannot serve the request, and up moves on
    as a stockout would. Before, up stopped there and rolled everything back."""
    fake.fault("tpu.v2", NODES.format(zone="us-central1-b"),
               {"error": {"code": 5, "message": "Reservation not found"}}, where="operation")
    r = up("rnf", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-c"
    assert "moving on to zone us-central1-c (us-central1-b: zone_unavailable)" in r.err, r.err
    assert nodes(fake) == [("us-central1-c", "rnf")]


def test_a_host_machine_type_the_zone_lacks_moves_the_host_vm_on(fake):
    """Compute's 400 "Machine type with name '...' does not exist in zone '...'" on the host VM's insert
    stopped the whole up; another zone has the type."""
    body = body_of("compute-machine-type-not-in-zone-terratest-1132", europe_west8_a="us-central1-b")
    fake.fault("compute.v1", INSTANCES.format(zone="us-central1-b"), body, status=400)
    r = up("mt", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["vm"]["zone"].endswith("us-central1-c") and doc["zone"] == "us-central1-b"
    assert "creating host VM mt in us-central1-b failed: zone_unavailable" in r.err, r.err
    assert instances(fake) == [("us-central1-c", "mt")]


def test_a_zone_not_served_when_asking_what_it_offers_is_left_out(fake):
    """Before 2026 a 403 "Location ... is not found or access is unauthorized." on the offering check
    stopped up as a missing permission; it only says this zone is not served to the project."""
    fake.fault("tpu.v2", TYPES.format(zone="us-central1-b"),
               body_of("tpu-location-403-gpuhunt-98", europe_west1_b="us-central1-b"), method="GET", status=403)
    r = up("ns", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-c" and "zone us-central1-b is left out" in r.err
    assert creates(fake) == 1


def test_a_regional_quota_skips_every_zone_of_the_region(fake):
    body = body_of("tpu-quota-region-429-body-marin-3200", us_east5="us-central1")
    fake.fault("tpu.v2", NODES.format(zone="us-central1-b"), body, status=429)
    r = up("rq", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "europe-west4-a"
    assert creates(fake) == 2, "us-central1-c shares the region's quota: not tried"
    assert "region us-central1: quota" in r.err


def test_a_host_vm_stockout_uses_zones_available(fake):
    """ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS names the zones that have capacity: the other zones
    of that region are skipped too, and the TPU VM stays where it was created."""
    body = body_of("compute-stockout-details-k8s-9834")
    fake.fault("compute.v1", INSTANCES.format(zone="us-central1-b"), body, where="operation")
    r = up("vs", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["vm"]["zone"].endswith("europe-west4-a") and doc["zone"] == "us-central1-b"
    assert creates(fake, "compute.instances.insert") == 2, "us-central1-c is not in zonesAvailable: not tried"
    assert instances(fake) == [("europe-west4-a", "vs")]


@pytest.mark.parametrize("entry_id, where", [
    ("compute-quota-region-skypilot-handler", "operation"),    # QUOTA_EXCEEDED in the insert operation
    ("compute-quota-403-call-hard-way-47", "call"),            # 403 on the call: quota, not a permission
])
def test_a_regional_compute_quota_moves_the_host_vm_to_another_region(fake, entry_id, where):
    body = body_of(entry_id, us_west1="us-central1")
    fake.fault("compute.v1", INSTANCES.format(zone="us-central1-b"), body, where=where,
               status=CORPUS[entry_id]["http_status"] if where == "call" else None)
    r = up("vq", "--json")
    assert r.code == 0, r.err
    assert r.json()["vm"]["zone"].endswith("europe-west4-a")
    assert instances(fake) == [("europe-west4-a", "vq")]


# ---- stop, nothing left ----------------------------------------------------------------------------------
def test_a_global_compute_quota_stops_and_rolls_back_the_tpu(fake):
    fake.fault("compute.v1", INSTANCES.format(zone="us-central1-b"), body_of("compute-quota-global-op-403-ai-on-gke-849"),
               where="operation")
    r = up("gq")
    assert r.code == 1
    line = error_line(r)
    assert "CPUS_ALL_REGIONS" in line and "no zone can help" in line
    assert "rolled back TPU gq (us-central1-b), nothing remains" in line, line
    assert creates(fake, "compute.instances.insert") == 1
    assert nodes(fake) == [] and instances(fake) == []


def test_a_missing_permission_stops_and_rolls_back_the_vm(fake):
    fake.fault("tpu.v2", NODES.format(zone="us-central1-b"), body_of("tpu-permission-body-tensorflow-tpu-859"),
               status=403)
    r = up("perm")
    assert r.code == 1
    line = error_line(r)
    assert "Permission denied on resource project" in line and "roles/tpu.admin" in line
    assert "rolled back VM perm (us-central1-b), nothing remains" in line
    assert creates(fake) == 1
    assert nodes(fake) == [] and instances(fake) == []


def test_every_zone_failing_stops_with_what_failed_where(fake):
    for zone in ("us-central1-b", "us-central1-c", "europe-west4-a"):
        fake.fault("tpu.v2", NODES.format(zone=zone),
                   body_of("tpu-stockout-terraform-21243", us_central1_c=zone), where="operation")
    r = up("none")
    assert r.code == 1
    line = error_line(r)
    assert "no zone could create a v2-8 TPU" in line
    assert "us-central1-b: stockout" in line and "europe-west4-a: stockout" in line
    assert "tried us-central1-b,us-central1-c,europe-west4-a" in line
    assert "rolled back VM none (us-central1-b), nothing remains" in line
    assert nodes(fake) == [] and instances(fake) == []
