"""`tpuctl up` / `down` on the GCP provider, with the real client libraries against the fake cloud."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl_process
from tests.integration.reservations import range_reservations

PROJECT = "tpuctl-test"


def _nodes(fake):
    return fake.resources()["nodes"]


def vms(fake):
    return fake.resources()["instances"]


def created_anything(fake) -> bool:
    counts = fake.call_counts()
    return any(counts.get(k) for k in ("compute.instances.insert", "tpu.v1.nodes.create", "tpu.v2.nodes.create",
                                       "tpu.v2.queuedResources.create"))


def test_node_architecture_up_and_down(fakegcp_env, tpuctl):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    r = tpuctl("up", "bert-node", "--zone", "us-central1-b", "--arch", "node", "--preemptible",
               "--label", "team=nlp", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["provider"] == "gcp" and doc["project"] == PROJECT and doc["zone"] == "us-central1-b"
    assert doc["tpu"]["arch"] == "node" and doc["tpu"]["state"] == "READY" and doc["tpu"]["health"] == "HEALTHY"
    assert doc["tpu"]["version"] == "2.16.1" and doc["tpu"]["preemptible"] and doc["cidr"] == "10.240.0.0/29"
    assert doc["tpu"]["cidr_block"] == "10.240.0.0/29"
    assert doc["tpu"]["labels"] == {"team": "nlp", "tpuctl-cluster": "bert-node", "tpuctl-role": "tpu"}
    assert doc["vm"]["state"] == "RUNNING" and doc["vm"]["labels"]["tpuctl-cluster"] == "bert-node"
    assert doc["tpu"]["endpoints"] and doc["tpu"]["endpoints"][0]["port"] == 8470
    # the choice of range is reserved where every tpuctl in the project sees it
    assert range_reservations(fakegcp_env)["bert-node"]["cidr"] == "10.240.0.0/29"
    counts = fakegcp_env.call_counts()
    assert counts["tpu.v1.nodes.create"] == 1 and counts["compute.instances.insert"] == 1

    r = tpuctl("down", "bert-node", "--json")
    assert r.code == 0, r.err
    assert r.json()["deleted"] == ["TPU bert-node (us-central1-b)", "VM bert-node (us-central1-b)"]
    assert tpuctl("status", "--json").json()["clusters"] == []
    assert "bert-node" not in range_reservations(fakegcp_env)


def _listed_metadata(fake, zone: str) -> list[tuple[str, dict[str, str]]]:
    """Each listed instance's and TPU node's metadata, from the list responses a user's
    ``gcloud compute instances list`` and ``gcloud compute tpus tpu-vm list`` read."""
    import urllib.request

    out = []
    for url, key in ((f"{fake.url}/compute/v1/projects/{PROJECT}/zones/{zone}/instances", "items"),
                     (f"{fake.url}/v2/projects/{PROJECT}/locations/{zone}/nodes", "nodes")):
        with urllib.request.urlopen(url, timeout=30) as resp:
            for item in json.load(resp).get(key) or []:
                meta = item.get("metadata") or {}
                pairs = {i["key"]: i.get("value", "") for i in meta.get("items", [])} if "items" in meta else meta
                out.append((f"{key} {item['name'].rsplit('/', 1)[-1]}", pairs))
    return out


def test_a_clusters_vm_and_tpu_carry_a_bootstrap_under_2kb_that_pins_the_script_up_staged(
        fakegcp_env, gcs_env, gcs_bucket, tpuctl):
    """Every listed VM and TPU VM used to carry the whole ~20 KB startup script; now its metadata is
    a small bootstrap naming the script's sha256, and the script is in the cluster's bucket."""
    from provision.cloud import startup

    r = tpuctl("up", "small-meta", "--zone", "us-central1-b", "--arch", "vm", "--bucket", f"gs://{gcs_bucket}")
    assert r.code == 0, r.err
    listed = _listed_metadata(fakegcp_env, "us-central1-b")
    assert [what for what, _ in listed] == ["items small-meta", "nodes small-meta"]   # the host VM, the TPU VM
    for _, meta in listed:
        assert sum(len(k) + len(v.encode()) for k, v in meta.items()) < 2048, meta
        assert startup.current().sha256 in meta["startup-script"]
    blob = gcs_env.client().bucket(gcs_bucket).get_blob(f"tpuctl/startup/{startup.current().sha256}.sh")
    assert blob.download_as_bytes() == (Path(__file__).parents[2] / "templates" / "host-startup.sh").read_bytes()
    # a bucket the script cannot go to is refused before anything is created
    fakegcp_env.clear_calls()
    r = tpuctl("up", "no-bucket", "--zone", "us-central1-b", "--arch", "vm", "--bucket", f"gs://{gcs_bucket}-gone")
    assert r.code == 2 and "does not exist" in r.err and not created_anything(fakegcp_env)


def test_vm_architecture_with_spot_and_startup_script(fakegcp_env, gcs_env, tpuctl):
    if gcs_env.client().lookup_bucket("my-runs") is None:
        gcs_env.create_bucket("my-runs")
    r = tpuctl("up", "bert-vm", "--zone", "us-central1-b", "--arch", "vm", "--spot", "--no-vm", "--json",
               "--bucket", "gs://my-runs", "--no-external-ips")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["tpu"]["arch"] == "vm" and doc["tpu"]["spot"] and doc["vm"] is None
    assert doc["tpu"]["version"] == "tpu-vm-tf-2.18.0-pjrt-v5p-and-below" and doc["cidr"] is None
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import tpu_v2

    client = tpu_v2.TpuClient(credentials=AnonymousCredentials(), transport="rest",
                              client_options={"api_endpoint": fakegcp_env.url})
    node = client.get_node(name=f"projects/{PROJECT}/locations/us-central1-b/nodes/bert-vm")
    assert node.scheduling_config.spot and not node.network_config.enable_external_ips
    assert node.metadata["tpuctl-role"] == "worker" and node.metadata["tpuctl-bucket"] == "gs://my-runs"
    assert node.metadata["startup-script"].startswith("#!/bin/bash")
    assert tpuctl("down", "bert-vm").code == 0
    assert client.list_nodes(parent=f"projects/{PROJECT}/locations/-").nodes == []


def test_multi_host_pod_slice_gets_the_pod_runtime(fakegcp_env, tpuctl):
    r = tpuctl("up", "pod", "--zone", "us-central2-b", "-a", "v4-32", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["tpu"]["version"] == "tpu-vm-tf-2.17.0-pod-pjrt"   # the newest pod image v4 zones list


def test_queued_resource_with_valid_until(fakegcp_env, tpuctl):
    r = tpuctl("up", "queued", "--zone", "us-central1-b", "--queued", "--valid-until", "1h", "--spot",
               "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["tpu"]["state"] == "READY"
    assert fakegcp_env.call_counts()["tpu.v2.queuedResources.create"] == 1
    assert tpuctl("down", "queued").code == 0
    counts = fakegcp_env.call_counts()
    assert counts.get("tpu.v2.queuedResources.delete") == 1


def test_concurrent_ups_get_disjoint_ranges(fakegcp_env):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    def up(name):
        return run_tpuctl_process("up", name, "--zone", "us-central1-b", "--arch", "node", "--preemptible",
                                  "--json", timeout=180)

    names = [f"conc-{i}" for i in range(8)]      # 8 at once in one project and zone
    with ThreadPoolExecutor(len(names)) as pool:
        results = list(pool.map(up, names))
    assert all(r.code == 0 for r in results), [r.err[-400:] for r in results if r.code]
    blocks = [r.json()["cidr"] for r in results]
    assert len(set(blocks)) == len(names), blocks
    reserved = range_reservations(fakegcp_env)
    assert sorted(reserved[n]["cidr"] for n in names) == sorted(blocks)


def test_stockout_fails_over_to_the_next_zone(fakegcp_env, tpuctl):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    fakegcp_env.stockout("us-central1-b")
    r = tpuctl("up", "fo", "--zone", "us-central1-b,us-central1-c", "--arch", "node", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-central1-c"
    assert "moving on to zone us-central1-c" in r.err
    # the host stays in the region of its TPU Node
    assert r.json()["vm"]["zone"] in ("us-central1-b", "us-central1-c")


def test_failover_across_regions_moves_the_node_host(fakegcp_env, tpuctl):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    fakegcp_env.stockout("us-central1-b")
    fakegcp_env.stockout("us-central1-c")
    r = tpuctl("up", "far", "--zone", "us-central1-b,us-central1-c,europe-west4-a", "--arch", "node", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["zone"] == "europe-west4-a" and doc["vm"]["zone"] == "europe-west4-a"
    names = [(v["zone"].rsplit("/", 1)[-1], v["name"]) for v in vms(fakegcp_env)]
    assert names == [("europe-west4-a", "far")], names


def test_quota_error_skips_the_whole_region(fakegcp_env, tpuctl):
    fakegcp_env.quota("us-central1", at="operation")
    r = tpuctl("up", "qu", "--zone", "us-central1-b,us-central1-c,europe-west4-a", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "europe-west4-a"
    assert fakegcp_env.call_counts()["tpu.v2.nodes.create"] == 2   # us-central1-c was never tried


def test_retries_through_a_503_burst(fakegcp_env, tpuctl):
    fakegcp_env.burst(503, count=3, path="/v2/.*/nodes")
    r = tpuctl("up", "bursty", "--zone", "us-central1-b", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["tpu"]["state"] == "READY"
    assert len(_nodes(fakegcp_env)) == 1


def test_failed_tpu_create_rolls_back_the_vm(fakegcp_env, tpuctl):
    fakegcp_env.deny("tpu.nodes.create")
    r = tpuctl("up", "rb", "--zone", "us-central1-b", "--arch", "vm")   # the host VM is started first
    assert r.code == 1
    line = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")][-1]
    assert "roles/tpu.admin" in line and "rolled back VM rb (us-central1-b), nothing remains" in line
    assert fakegcp_env.call_counts()["compute.instances.insert"] == 1
    assert vms(fakegcp_env) == [] and _nodes(fakegcp_env) == []


def test_failed_node_create_makes_no_host_vm(fakegcp_env, tpuctl):
    """A TPU Node is asked for before its host: a refused create leaves nothing, not even a VM."""
    fakegcp_env.allow_tpu_nodes()
    fakegcp_env.deny("tpu.nodes.create")
    r = tpuctl("up", "rb", "--zone", "us-central1-b", "--arch", "node")
    assert r.code == 1 and "roles/tpu.admin" in r.err
    assert "compute.instances.insert" not in fakegcp_env.call_counts()
    assert vms(fakegcp_env) == [] and _nodes(fakegcp_env) == []
    assert "rb" not in range_reservations(fakegcp_env)


def test_disabled_api_names_the_api_to_enable(fakegcp_env, tpuctl):
    fakegcp_env.disable_service("tpu")
    r = tpuctl("up", "dis", "--zone", "us-central1-b", "--no-vm")
    assert r.code in (1, 2)
    assert "gcloud services enable tpu.googleapis.com" in r.err
    assert vms(fakegcp_env) == []


def test_cidr_conflict_takes_the_next_block(fakegcp_env, tpuctl):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    fakegcp_env.cidr_conflicts(count=1)
    r = tpuctl("up", "cc", "--zone", "us-central1-b", "--arch", "node", "--json")
    assert r.code == 0, r.err
    assert r.json()["cidr"] != "10.240.0.0/29"
    assert "conflicts with something on the network" in r.err
    assert range_reservations(fakegcp_env)["cc"]["cidr"] == r.json()["cidr"]


def test_used_ranges_include_subnets_routes_and_peerings(fakegcp_env, tpuctl):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    fakegcp_env.add_subnetwork("pods", "us-central1", "10.240.0.0/28", secondary={"svc": "10.240.0.16/28"})
    fakegcp_env.add_route("10.240.0.32/27", name="to-onprem", next_hop_ip="10.128.0.5")
    fakegcp_env.add_peering("corp", ["10.240.0.64/26"])
    r = tpuctl("up", "ranges", "--zone", "us-central1-b", "--arch", "node", "--json")
    assert r.code == 0, r.err
    assert r.json()["cidr"] == "10.240.0.128/29"


def test_an_ipv6_only_subnet_does_not_break_the_range_scan(fakegcp_env, tpuctl):
    """An IPv6-only subnet has no ``ipCidrRange`` (stackType IPV6_ONLY; the field is IPv4 only: gcloud
    528's compute v1 API definitions, google-cloud-compute's ``Subnetwork``): nothing to avoid."""
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    fakegcp_env.add_subnetwork("v6only", "us-central1", "")
    fakegcp_env.add_subnetwork("pods", "us-central1", "10.240.0.0/29")
    r = tpuctl("up", "v6", "--zone", "us-central1-b", "--arch", "node", "--json")
    assert r.code == 0, r.err
    assert r.json()["cidr"] == "10.240.0.8/29"
    r = tpuctl("up", "v6b", "--zone", "us-central1-b", "--arch", "node", "--cidr", "10.240.0.0/29")
    assert r.code == 2 and "overlaps 10.240.0.0/29 (subnetwork pods in us-central1)" in r.err


def test_a_private_services_access_range_is_avoided(fakegcp_env, tpuctl):
    """Private services access allocates a range as a global address (purpose VPC_PEERING, address,
    prefixLength; gcloud 528's compute v1 API definitions: "VPC_PEERING for global internal IP
    addresses used for private services access allocated ranges"). Producers fill it over the
    peering as they create services, so the whole allocation is taken, not only what the peering
    exports today."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    addresses = compute_v1.GlobalAddressesClient(credentials=AnonymousCredentials(), transport="rest",
                                                 client_options={"api_endpoint": fakegcp_env.url})
    addresses.insert(project=PROJECT, address_resource=compute_v1.Address(
        name="google-managed-services-default", address_type="INTERNAL", purpose="VPC_PEERING",
        address="10.240.0.0", prefix_length=20, network=f"projects/{PROJECT}/global/networks/default"))
    r = tpuctl("up", "psa", "--zone", "us-central1-b", "--arch", "node", "--json")
    assert r.code == 0, r.err
    assert r.json()["cidr"] == "10.240.16.0/29"
    assert "conflicts with something on the network" not in r.err
    assert fakegcp_env.call_counts()["tpu.v1.nodes.create"] == 1
    r = tpuctl("up", "psa2", "--zone", "us-central1-b", "--arch", "node", "--cidr", "10.240.8.0/29")
    assert r.code == 2
    assert "overlaps 10.240.0.0/20 (private services access range google-managed-services-default" in r.err


def test_bad_cidr_is_refused_before_anything_is_created(fakegcp_env, tpuctl):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    r = tpuctl("up", "badc", "--zone", "us-central1-b", "--arch", "node", "--cidr", "10.128.0.8/29")
    assert r.code == 2
    assert "overlaps 10.128.0.0/20 (subnetwork default in us-central1)" in r.err
    assert not created_anything(fakegcp_env)
    r = tpuctl("up", "badc", "--zone", "us-central1-b", "--arch", "node", "--cidr", "10.250.0.0/30")
    assert r.code == 2 and "too small" in r.err
    assert not created_anything(fakegcp_env)


def test_unoffered_type_is_refused_before_anything_is_created(fakegcp_env, tpuctl):
    r = tpuctl("up", "nope", "--zone", "us-central1-b", "-a", "v4-8")
    assert r.code == 2 and "v4-8 is not offered in us-central1-b" in r.err
    assert not created_anything(fakegcp_env)


def test_rerun_after_a_crash_mid_up_adopts(fakegcp_factory):
    fake = fakegcp_factory(latency_scale=8)        # TPU create takes ~5 s
    fake.allow_tpu_nodes()
    env = {**os.environ, **fake.env()}
    proc = subprocess.Popen([sys.executable, "-m", "provision", "up", "crash", "--zone", "us-central1-b",
                             "--arch", "node"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not fake.call_counts().get("tpu.v1.nodes.create"):
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    r = run_tpuctl_process("up", "crash", "--zone", "us-central1-b", "--arch", "node", "--json", env=fake.env(),
                           timeout=120)
    assert r.code == 0, r.err
    assert any(a.startswith("TPU crash") for a in r.json()["adopted"])
    counts = fake.call_counts()
    assert counts["tpu.v1.nodes.create"] == 1 and counts["compute.instances.insert"] == 1
    assert len(fake.resources().get("nodes") or []) == 1


def test_preempted_node_is_recreated_with_its_old_range(fakegcp_env, tpuctl):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    first = tpuctl("up", "again", "--zone", "us-central1-b", "--arch", "node", "--preemptible", "--json").json()
    tpuctl("up", "other", "--zone", "us-central1-b", "--arch", "node", "--json")
    assert tpuctl("simulate", "preempt", "again").code == 0
    second = tpuctl("up", "again", "--zone", "us-central1-b", "--arch", "node", "--preemptible", "--json")
    assert second.code == 0, second.err
    assert second.json()["cidr"] == first["cidr"] and second.json()["tpu"]["state"] == "READY"


@pytest.mark.parametrize("arch", ["node", "vm"])
def test_dry_run_creates_nothing(fakegcp_env, tpuctl, arch):
    r = tpuctl("up", "dry", "--zone", "us-central1-b", "--arch", arch, "--dry-run", "--json")
    assert r.code == 0 and r.json()["dry_run"] and r.json()["planned"]
    assert not created_anything(fakegcp_env)


def test_node_with_bucket_grants_the_tpu_service_agent_that_bucket_only(fakegcp_env, tpuctl, monkeypatch):
    fakegcp_env.allow_tpu_nodes()     # a project that kept TPU Node access
    from tests.integration.test_stage_iam import IamStub

    stub = IamStub()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", stub.url)
        r = tpuctl("up", "granted", "--zone", "us-central1-b", "--arch", "node", "--bucket", "gs://iam-bucket",
                   "--json")
        assert r.code == 0, r.err
        member = next(m for b in stub.policy["bindings"] if b["role"] == "roles/storage.objectUser"
                      for m in b["members"])
        assert member.startswith("serviceAccount:service-") and member.endswith("@cloud-tpu.iam.gserviceaccount.com")
        assert any("roles/storage.objectUser on gs://iam-bucket" in n for n in r.json()["notes"])
        # a missing bucket is refused before anything is created
        fakegcp_env.clear_calls()
        r = tpuctl("up", "nobucket", "--zone", "us-central1-b", "--arch", "node", "--bucket", "gs://no-such-bucket")
        assert r.code == 2 and "bucket gs://no-such-bucket does not exist" in r.err
        assert not created_anything(fakegcp_env)
    finally:
        stub.server.shutdown()


@pytest.mark.parametrize("args, what", [([], "the host VM and the TPU VM"), (["--no-vm"], "the TPU VM")])
def test_the_default_account_note_names_only_what_the_cluster_has(fakegcp_env, args, what):
    """With --no-vm the note still said "the host VM and TPU VM run as ..."."""
    r = run_tpuctl_process("up", "acct", "--zone", "us-central1-b", *args)
    assert r.code == 0, r.err
    assert (f"note: {what} will run as the Compute Engine default service account, which is often a project "
            "Editor; pass --service-account with an account that has only the roles in docs/reliability.md"
            ) in r.err.splitlines()
