"""TPUs on Compute Engine: ``up``, ``status`` and ``down`` through the fake cloud, over the wire.

The fake lists TPU machine types per zone (tests/fakegcp/catalog.py: ct6e in us-east5-a, ct5p in
us-east5-c, tpu7x in us-central1-c) and checks every Compute Engine TPU request against compute
v1's discovery document; with ``--api auto`` (the default) tpuctl asks the zone's machine types
and takes the Compute Engine path where the generation is listed.
"""

from __future__ import annotations

import shutil

import pytest

from provision.cloud import startup
from provision.cluster.ledger import ledger_dir
from tests.conftest import run_tpuctl_process
from tests.fakegcp import catalog, discovery

PROJECT = "tpuctl-test"


@pytest.fixture(autouse=True)
def fast(fakegcp_env):
    """Small latencies: what is tested is the order of calls and states, not their durations."""
    fakegcp_env.set_latencies(vm_create=0.1, vm_delete=0.05, address_create=0.02, queued_provisioning=0.2,
                              tpu_create=0.15, tpu_delete=0.1)


def _res(fake) -> dict:
    res = fake.resources()
    return {k: res[k] for k in ("instances", "instanceGroupManagers", "instanceTemplates", "resourcePolicies")}


def _nothing_left(fake) -> bool:
    return not any(_res(fake).values())


def _meta(inst: dict) -> dict:
    return {i["key"]: i["value"] for i in inst["metadata"].get("items", [])}


@pytest.mark.parametrize(("accelerator", "zone", "machine", "family"), [
    ("v6e-8", "us-east5-a", "ct6e-standard-8t", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("v5p-8", "us-east5-c", "ct5p-hightpu-4t", "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"),
    ("tpu7x-8", "us-central1-c", "tpu7x-standard-4t", "ubuntu-accel-2404-amd64-tpu-tpu7x"),
])
def test_up_with_default_options_makes_a_compute_engine_tpu_vm(fakegcp_env, gcs_env, tpuctl, accelerator, zone,
                                                               machine, family):
    bucket = gcs_env.create_bucket()
    r = tpuctl("up", "ce", "--zone", zone, "-a", accelerator, "--bucket", f"gs://{bucket}", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["api"] == "compute" and doc["tpu"]["state"] == "READY" and doc["tpu"]["api"] == "compute"
    assert doc["tpu"]["accelerator_type"] == accelerator and doc["tpu"]["machine_type"] == machine
    assert machine in catalog.machine_types_in(zone)
    # the image is the family's newest, resolved in the cloud, never a name tpuctl carries
    assert doc["tpu"]["version"] == catalog.ACCELERATOR_IMAGES[family]
    assert fakegcp_env.call_counts()["compute.images.getFromFamily"] == 1
    tpu = next(i for i in _res(fakegcp_env)["instances"] if i["name"] == "ce-tpu")
    assert tpu["machineType"].endswith(f"/machineTypes/{machine}") and tpu["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert tpu["scheduling"]["provisioningModel"] == "STANDARD"
    assert tpu["disks"][0]["source"]
    assert tpu["labels"] == {"tpuctl-cluster": "ce", "tpuctl-role": "tpu"}
    meta = _meta(tpu)
    assert meta["tpuctl-role"] == "worker" and meta["tpuctl-bucket"] == f"gs://{bucket}" and meta["tpuctl-worker-number"] == "0"
    # the small bootstrap, pinning the startup script that `up` put in the bucket
    assert meta["startup-script"].startswith("#!/bin/bash") and len(meta["startup-script"]) < 2048
    assert gcs_env.client().bucket(bucket).get_blob(startup.current().object_name).download_as_bytes() == \
        startup.current().script
    # the host VM is a VM, the TPU a TPU: status shows one cluster with both
    st = tpuctl("status", "ce", "--json").json()["clusters"][0]
    assert st["tpu"]["api"] == "compute" and st["vm"]["name"] == "ce"
    r = tpuctl("down", "ce", "--json")
    assert r.code == 0, r.err
    assert sorted(r.json()["deleted"]) == [f"TPU ce ({zone})", f"VM ce ({zone})"]
    assert _nothing_left(fakegcp_env)


def test_a_multi_host_slice_is_one_mig_with_its_workload_policy_and_goes_whole(fakegcp_env, tpuctl):
    fake = fakegcp_env
    r = tpuctl("up", "pod", "--zone", "us-east5-c", "-a", "v5p-32", "--spot", "--no-vm", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["tpu"]["hosts"] == 4 and len(doc["tpu"]["endpoints"]) == 4 and doc["tpu"]["capacity"] == "spot"
    res = _res(fake)
    (mig,) = res["instanceGroupManagers"]
    assert mig["name"] == "pod-tpu" and mig["targetSize"] == 4 and mig["targetSizePolicy"] == {"mode": "BULK"}
    assert mig["instanceLifecyclePolicy"] == {"defaultActionOnFailure": "DO_NOTHING"}
    assert mig["status"]["appliedAcceleratorTopologies"] == [{"acceleratorTopology": "2x2x4", "state": "ACTIVE"}]
    (policy,) = res["resourcePolicies"]
    assert policy["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}
    assert mig["resourcePolicies"]["workloadPolicy"].endswith("/regions/us-east5/resourcePolicies/pod-tpu")
    (template,) = res["instanceTemplates"]
    sched = template["properties"]["scheduling"]
    assert sched["provisioningModel"] == "SPOT" and sched["instanceTerminationAction"] == "DELETE"
    workers = sorted(res["instances"], key=lambda i: i["name"])
    assert [i["name"] for i in workers] == [f"pod-tpu-{n}" for n in range(4)]
    assert [_meta(i)["tpuctl-worker-number"] for i in workers] == ["0", "1", "2", "3"]
    # the endpoints are the workers' addresses in worker order: worker 0 first (the coordinator)
    assert [e["ip_address"] for e in doc["tpu"]["endpoints"]] == [i["networkInterfaces"][0]["networkIP"] for i in workers]
    # the MIG was made empty, then every worker at once
    calls = [c["call"] for c in fake.calls()]
    order = [calls.index(c) for c in ("compute.resourcePolicies.insert", "compute.instanceTemplates.insert",
                                      "compute.instanceGroupManagers.insert",
                                      "compute.instanceGroupManagers.createInstances")]
    assert order == sorted(order) and calls.count("compute.instanceGroupManagers.createInstances") == 1

    r = tpuctl("down", "pod", "--json")
    assert r.code == 0, r.err and r.json()["deleted"] == ["TPU pod (us-east5-c)"]
    assert _nothing_left(fake)


def test_every_compute_engine_call_tpuctl_makes_is_a_discovery_document_method(fakegcp_env, tpuctl):
    assert tpuctl("up", "c", "--zone", "us-east5-c", "-a", "v5p-16", "--capacity", "flex-start",
                  "--flex-start", "2h").code == 0
    assert tpuctl("status", "c").code == 0 and tpuctl("down", "c").code == 0
    made = {c["call"] for c in fakegcp_env.calls() if c["call"].startswith("compute.")}
    assert {"compute.instanceGroupManagerResizeRequests.insert", "compute.instanceGroupManagers.insert",
            "compute.instanceTemplates.insert", "compute.resourcePolicies.insert"} <= made
    for call in made:
        assert discovery.method(call), call       # KeyError: not a method of compute v1
    # the fake checks each body against the document: none was refused (400 INVALID_ARGUMENT)
    refused = [c for c in fakegcp_env.calls() if c["call"].startswith("compute.") and c["status"] == 400]
    assert refused == []


def test_capacity_order_moves_past_a_spot_stockout_to_flex_start_and_says_why(fakegcp_env, tpuctl):
    fake = fakegcp_env
    fake.stockout("us-east5-c", kind="compute-tpu", model="SPOT")
    r = tpuctl("up", "cap", "--zone", "us-east5-c", "-a", "v5p-16", "--no-vm", "--capacity", "spot,flex-start,on-demand",
               "--flex-start", "3h", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["tpu"]["capacity"] == "flex-start" and doc["tpu"]["state"] == "READY"
    assert "moving on to zone us-east5-c (flex-start) (us-east5-c (spot): stockout)" in r.err
    note = next(n for n in doc["notes"] if n.startswith("chose "))
    assert "(flex-start)" in note and "us-east5-c (spot): stockout" in note
    res = _res(fake)
    (template,) = res["instanceTemplates"]
    assert template["properties"]["scheduling"]["provisioningModel"] == "FLEX_START"
    # the failed spot slice was deleted before the flex-start one was made: one of each part is left
    assert len(res["instanceGroupManagers"]) == 1 and len(res["resourcePolicies"]) == 1
    assert tpuctl("down", "cap").code == 0 and _nothing_left(fake)


def test_up_says_the_capacity_it_took_not_the_first_it_asked_for(fakegcp_env):
    """The summary names the capacity that was taken, which is what is billed: spot stocked out
    and flex-start was taken (a FLEX_START template, a 7-day request), not the spot asked for
    first. Through the installed tpuctl."""
    fakegcp_env.stockout("us-east5-c", kind="compute-tpu", model="SPOT")
    up = run_tpuctl_process("up", "cap", "--zone", "us-east5-c", "-a", "v5p-8", "--no-vm",
                            "--capacity", "spot,flex-start,on-demand")
    assert up.code == 0, up.err
    assert up.out.splitlines()[0] == ("cluster cap is up in us-east5-c: TPU v5p-8 (vm, flex-start, Compute Engine) "
                                      "READY/HEALTHY, no host VM"), up.out
    again = run_tpuctl_process("up", "cap")      # NAME alone: the cluster as its up made it
    assert again.code == 0, again.err
    assert ("up cap: as its up made it (this machine's cluster cache): v5p-8 in us-east5-c, flex-start, "
            "Compute Engine") in again.err.splitlines(), again.err
    assert again.out.splitlines()[0].startswith("cluster cap is up in us-east5-c: TPU v5p-8 (vm, flex-start, "), again.out
    assert run_tpuctl_process("down", "cap").code == 0 and _nothing_left(fakegcp_env)


def test_a_dry_run_lists_the_capacity_order_with_prices_and_up_json_plans_what_it_took(fakegcp_env):
    """A dry run named only the first capacity and its price, and after flex-start was taken
    ``up --json`` still planned a spot TPU: a user could not see what the order would cost, nor
    read back what was made."""
    dry = run_tpuctl_process("up", "cap", "--zone", "us-east5-c", "-a", "v5p-8", "--no-vm",
                             "--capacity", "spot,flex-start,on-demand", "--dry-run")
    assert dry.code == 0, dry.err
    assert ("would try, in the --capacity order: spot in us-east5-c ($6.72/hour), flex-start in us-east5-c "
            "($16.80/hour; no flex-start list price known; priced at the on-demand rate (an upper bound)), "
            "on-demand in us-east5-c ($16.80/hour)") in dry.out.splitlines(), dry.out
    # a capacity no source prices says so (tpu7x spot), never a figure
    dry = run_tpuctl_process("up", "x", "--zone", "us-central1-c", "-a", "tpu7x-8", "--no-vm",
                             "--capacity", "spot,on-demand", "--dry-run")
    assert dry.code == 0, dry.err
    assert ("would try, in the --capacity order: spot in us-central1-c (price unknown), on-demand in "
            "us-central1-c ($48.00/hour)") in dry.out.splitlines(), dry.out
    assert _nothing_left(fakegcp_env)

    fakegcp_env.stockout("us-east5-c", kind="compute-tpu", model="SPOT")
    up = run_tpuctl_process("up", "cap", "--zone", "us-east5-c", "-a", "v5p-8", "--no-vm",
                            "--capacity", "spot,flex-start,on-demand", "--json")
    assert up.code == 0, up.err
    image = catalog.ACCELERATOR_IMAGES["ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"]
    taken = f"TPU cap v5p-8 in us-east5-c on Compute Engine (ct5p-hightpu-4t, flex-start), image {image}"
    assert up.json()["planned"] == [taken]
    assert up.json()["capacity"] == "flex-start"
    assert run_tpuctl_process("down", "cap").code == 0 and _nothing_left(fakegcp_env)


@pytest.mark.parametrize("end", ["FAILED", "CANCELLED", "timeout"])
def test_a_flex_start_request_that_fails_is_cancelled_or_times_out_leaves_nothing(fakegcp_env, tpuctl, end):
    fake = fakegcp_env
    fake.stockout("us-east5-c", kind="compute-tpu", model="FLEX_START")     # it waits in ACCEPTED
    import threading
    import time

    def finish() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and end != "timeout":
            if fake.resources()["instanceGroupManagers"]:
                time.sleep(0.3)
                fake.end_resize_request("us-east5-c", "flex-tpu", end, message="no capacity for the run")
                return
            time.sleep(0.05)

    t = threading.Thread(target=finish)
    t.start()
    r = tpuctl("up", "flex", "--zone", "us-east5-c", "-a", "v5p-16", "--flex-start", "1h", "--no-vm", "--timeout",
               "3s" if end == "timeout" else "60s")
    t.join()
    assert r.code == 1
    line = r.err.strip().splitlines()[-1]
    if end == "timeout":     # as --queued: giving up deletes the request with the slice
        assert "up timed out waiting for create tpu flex in us-east5-c; rolled back TPU flex (us-east5-c)" in line
    elif end == "FAILED":      # that zone could not fill it: the next zone or capacity would be tried
        assert "no zone could create a v5p-16 TPU (us-east5-c: request_failed)" in line
        assert "flex-start request FAILED: FAILED: no capacity for the run" in r.err
    else:                    # someone cancelled it: up stops
        assert "the flex-start request flex-tpu-flex was cancelled" in line
    assert _nothing_left(fake)


def test_a_cluster_keeps_the_api_it_was_made_with(fakegcp_env, tpuctl):
    assert tpuctl("up", "k", "--zone", "us-east5-a", "-a", "v6e-8", "--no-vm").code == 0
    r = tpuctl("up", "k", "--zone", "us-east5-a", "-a", "v6e-8", "--no-vm", "--api", "tpu")
    assert r.code == 2 and "made with Compute Engine (--api compute)" in r.err.strip().splitlines()[-1]
    again = tpuctl("up", "k", "--zone", "us-east5-a", "-a", "v6e-8", "--no-vm", "--json")
    assert again.code == 0 and again.json()["adopted"] and not again.json()["created"]


@pytest.mark.parametrize(("args", "words"), [
    (("-a", "v6e-8", "--api", "compute", "--zone", "us-east5-b"), "v6e-8 is not offered in us-east5-b"),
    (("-a", "tpu7x-8", "--zone", "us-central1-b"), "tpu7x-8 is not offered in us-central1-b"),
    (("-a", "v5litepod-8", "--flex-start", "1h", "--zone", "us-west4-a"), "flex-start can be had only on Compute Engine"),
    (("-a", "v6e-8", "--flex-start", "3m", "--zone", "us-east5-a"), "flex-start runs 10 minutes to 7 days"),
    (("-a", "v6e-8", "--spot", "--reservation", "r1", "--zone", "us-east5-a"), "both given"),
    (("-a", "v6e-8", "--capacity", "spot,cheap", "--zone", "us-east5-a"), "unknown capacity 'cheap'"),
    (("-a", "v6e-8", "--capacity", "reservation", "--zone", "us-east5-a"), "needs a reservation"),
])
def test_what_cannot_be_had_is_one_line_before_anything_is_created(fakegcp_env, tpuctl, args, words):
    r = tpuctl("up", "bad", "--no-vm", *args)
    assert r.code == 2, r.err
    assert words in r.err.strip().splitlines()[-1]
    assert not any(k.endswith(("insert", "create", "createInstances")) for k in fakegcp_env.call_counts())


def test_a_reservation_bound_tpu_names_its_reservation(fakegcp_env, tpuctl):
    r = tpuctl("up", "res", "--zone", "us-central1-c", "-a", "tpu7x-2", "--reservation", "team-r", "--no-vm", "--json")
    assert r.code == 0, r.err and r.json()["tpu"]["capacity"] == "reservation"
    (tpu,) = _res(fakegcp_env)["instances"]
    assert tpu["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
    assert tpu["reservationAffinity"] == {"consumeReservationType": "SPECIFIC_RESERVATION",
                                          "key": "compute.googleapis.com/reservation-name", "values": ["team-r"]}
    assert tpu["machineType"].endswith("/tpu7x-standard-1t")


def test_down_idle_and_cost_see_both_kinds_side_by_side(fakegcp_env, gcs_env, gcs_bucket, tpuctl):
    """The reaper finds an idle TPU of either API, deletes it (a slice whole: MIG, template, policy),
    never a host VM, and records what it saved where `cost` reads it."""
    fake, bucket = fakegcp_env, f"gs://{gcs_bucket}"
    for args in (("ce", "--zone", "us-east5-c", "-a", "v5p-16", "--spot"),
                 ("api", "--zone", "us-central1-b", "-a", "v2-8", "--preemptible")):
        r = tpuctl("up", *args, "--bucket", bucket)
        assert r.code == 0, r.err
    assert {n["tpu"]["api"] for n in tpuctl("status", "--json").json()["clusters"]} == {"compute", "tpu"}
    r = tpuctl("down", "--idle", "--idle-for", "0s", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert sorted(doc["deleted"]) == ["TPU api (us-central1-b)", "TPU ce (us-east5-c)"]
    # v2-8 preemptible $1.35 + v5p-16 spot (8 chips on 2 VMs) x $1.68 (us-east5): each at its tier and region
    assert doc["saves_usd_per_hour"] == pytest.approx(1.35 + 8 * 1.68)
    res = _res(fake)
    assert sorted(i["name"] for i in res["instances"]) == ["api", "ce"]      # the host VMs stay
    assert not res["instanceGroupManagers"] and not res["instanceTemplates"] and not res["resourcePolicies"]
    cost = tpuctl("cost", "ce", "--json")
    assert cost.code == 0, cost.err
    (ce,) = [c for c in cost.json()["clusters"] if c["cluster"] == "ce"]
    (life,) = ce["lifetimes"]
    assert life["accelerator_type"] == "v5p-16" and life["deleted_by"] == "reaper" and life["interruptible"]
    assert life["hourly_usd"] == 13.44 and ce["account"]["billed_hours"] > 0
    # from the bucket alone (another machine): every cluster's ledger, as `cost NAME` reads it,
    # found by the fleet's one listing of the bucket
    shutil.rmtree(ledger_dir("gcp", PROJECT), ignore_errors=True)
    alone = {c["cluster"]: c["lifetimes"] for c in tpuctl("cost", "--json").json()["clusters"]}
    for name in ("ce", "api"):
        (named,) = [c for c in tpuctl("cost", name, "--json").json()["clusters"] if c["cluster"] == name]
        assert named["lifetimes"] and alone[name] == named["lifetimes"], name


def test_a_degraded_slice_or_a_deleted_spot_vm_reads_as_preempted_and_up_recreates_it_whole(fakegcp_env, tpuctl):
    fake = fakegcp_env
    assert tpuctl("up", "deg", "--zone", "us-east5-c", "-a", "v5p-16", "--spot", "--no-vm").code == 0
    assert tpuctl("up", "one", "--zone", "us-central1-c", "-a", "tpu7x-8", "--spot", "--no-vm").code == 0
    fake.set_topology("us-east5-c", "deg-tpu", "ACTIVE_DEGRADED")        # the VMs run, the ICI does not
    fake.preempt_instance("us-central1-c", "one-tpu")                    # spot, termination action DELETE
    st = {c["name"]: c["tpu"] for c in tpuctl("status", "--json").json()["clusters"]}
    assert st["deg"]["state"] == "PREEMPTED" and "ACTIVE_DEGRADED" in st["deg"]["health_description"]
    # its VM is gone; Compute Engine's preemption record and the cached spec keep it the cluster's TPU
    assert (st["one"]["state"], st["one"]["accelerator_type"]) == ("PREEMPTED", "tpu7x-8")
    fake.clear_calls()
    r = tpuctl("up", "deg", "--zone", "us-east5-c", "-a", "v5p-16", "--spot", "--no-vm", "--json")
    assert r.code == 0, r.err and r.json()["tpu"]["state"] == "READY"
    counts = fake.call_counts()
    # deleted whole, made whole again: one MIG, template and policy each, both workers in one create
    for call in ("instanceGroupManagers.delete", "instanceTemplates.delete", "resourcePolicies.delete",
                 "instanceGroupManagers.insert", "instanceTemplates.insert", "resourcePolicies.insert",
                 "instanceGroupManagers.createInstances"):
        assert counts.get(f"compute.{call}") == 1, call
    (mig,) = _res(fake)["instanceGroupManagers"]
    assert mig["status"]["appliedAcceleratorTopologies"][0]["state"] == "ACTIVE"
    r = tpuctl("up", "one", "--zone", "us-central1-c", "-a", "tpu7x-8", "--spot", "--no-vm", "--json")
    assert r.code == 0, r.err and r.json()["tpu"]["state"] == "READY"


@pytest.mark.parametrize("then", ["down", "up"])
def test_what_an_up_killed_halfway_left_of_a_slice_is_cleaned_up(fakegcp_env, tpuctl, then):
    """An up killed after its workload policy and template but before its MIG (no rollback ran)
    leaves parts that bill nothing but would block the next slice of that name: they read as a
    TERMINATED TPU of the cluster, which down deletes and up replaces."""
    import json
    import urllib.request

    fake = fakegcp_env
    description = "tpuctl cluster half: v5p-16 in us-east5-c"
    for path, body in (("regions/us-east5/resourcePolicies", {"name": "half-tpu", "description": description,
                        "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x2"}}),
                       ("global/instanceTemplates", {"name": "half-tpu", "description": description,
                        "properties": {"machineType": "ct5p-hightpu-4t"}})):
        req = urllib.request.Request(f"{fake.url}/compute/v1/projects/{fake.project}/{path}", method="POST",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()
    (st,) = tpuctl("status", "half", "--json").json()["clusters"]
    assert st["tpu"]["state"] == "TERMINATED" and st["tpu"]["accelerator_type"] == "v5p-16"
    assert "only its instance template and workload policy remain" in st["tpu"]["health_description"]
    if then == "down":
        assert tpuctl("down", "half").code == 0
        assert _nothing_left(fake)
    else:
        r = tpuctl("up", "half", "--zone", "us-east5-c", "-a", "v5p-16", "--no-vm", "--json")
        assert r.code == 0, r.err
        assert r.json()["tpu"]["state"] == "READY" and len(_res(fake)["instanceTemplates"]) == 1


def test_a_regional_quota_on_a_slice_create_moves_to_another_region_and_leaves_nothing(fakegcp_env, tpuctl):
    """Compute Engine's per-family quota error, as Google sends it (tests/corpus:
    compute-quota-region-family-terraform-20573, a createInstances operation's error here), skips
    the region; the slice made there is deleted whole before the next one is asked for."""
    import json
    from pathlib import Path

    corpus = {e["id"]: e for e in json.loads((Path(__file__).resolve().parents[1] / "corpus" /
                                              "google_errors.json").read_text())["entries"]}
    body = json.loads(json.dumps(corpus["compute-quota-region-family-terraform-20573"]["body"])
                      .replace("us-central1", "us-east5"))
    fake = fakegcp_env
    fake.fault("compute.v1", r"^/compute/v1/projects/[^/]+/zones/us-east5-c/instanceGroupManagers/[^/]+/createInstances$",
               body, where="operation")
    r = tpuctl("up", "q", "--zone", "us-east5-c,us-south1-b", "-a", "v5p-16", "--no-vm", "--json")
    assert r.code == 0, r.err
    assert r.json()["zone"] == "us-south1-b" and "region us-east5: quota" in r.err
    res = _res(fake)
    assert [m["zone"].rsplit("/", 1)[-1] for m in res["instanceGroupManagers"]] == ["us-south1-b"]
    assert [p["name"] for p in res["resourcePolicies"]] == ["q-tpu"] and len(res["instanceTemplates"]) == 1


def test_an_unknown_price_is_shown_as_unknown_in_up_status_and_down(fakegcp_env):
    """A price no source knows is shown as unknown, never as a price a user would budget by: a
    tpu7x spot TPU is not "$0.00/hour", its cluster's total is not the host VM's $0.07 alone, and
    deleting it does not "SAVE $/H 0.00". Through the installed tpuctl."""
    up = run_tpuctl_process("up", "x7", "--zone", "us-central1-c", "-a", "tpu7x-8", "--spot")
    assert up.code == 0, up.err
    lines = up.out.splitlines()
    assert "list price: at least $0.07/hour (the TPU's price is unknown) while it exists; tpuctl down x7 deletes it" \
        in lines, up.out
    assert any(ln.startswith("  TPU tpu7x-8: unknown/hour (us-central1 spot/preemptible, ")
               and ln.endswith("no spot/preemptible price known for tpu7x-8)") for ln in lines), up.out
    st = run_tpuctl_process("status")
    assert st.code == 0, st.err
    row = next(ln for ln in st.out.splitlines() if ln.startswith("x7 "))
    assert row.split()[-1] == ">=0.07", st.out
    assert "x7: at least $0.07/hour (the TPU's price is unknown) in all" in st.out
    (cluster,) = run_tpuctl_process("status", "--json").json()["clusters"]
    assert cluster["hourly_usd"] is None and cluster["price"]["tpu"]["usd_per_hour"] is None
    idle = run_tpuctl_process("down", "--idle", "--idle-for", "0s", "--dry-run")
    assert idle.code == 0, idle.err
    row = next(ln for ln in idle.out.splitlines() if ln.startswith("x7 "))
    assert row.split()[-1] == "unknown", idle.out
    assert "would delete 1 TPU(s), saves unknown (TPU x7's price is unknown) at list price (us-central1 " \
        "spot/preemptible, Cloud Billing Catalog API, -; no spot/preemptible price known for tpu7x-8)" in idle.out
    doc = run_tpuctl_process("down", "--idle", "--idle-for", "0s", "--dry-run", "--json").json()
    assert doc["saves_usd_per_hour"] is None
    down = run_tpuctl_process("down", "x7", "--dry-run")
    assert "saves at least $0.07/hour (TPU x7 (us-central1-c)'s price is unknown) at list price" in down.out, \
        down.out
    assert "  TPU x7 (us-central1-c): unknown/hour (us-central1 spot/preemptible, " in down.out


def test_a_zone_that_does_not_exist_is_named_as_such_before_anything_is_created(fakegcp_env):
    """A zone that does not exist is named as such, since that is what the user must fix: not "v2-8
    is not offered in us-central1-z" for a zone the cloud's zones.list does not have."""
    r = run_tpuctl_process("up", "z", "--zone", "us-central1-z", "-a", "v2-8")
    assert r.code == 2, r.err
    assert r.err.splitlines()[-1] == ("tpuctl: error: no zone us-central1-z in region us-central1; its zones: "
                                      "us-central1-a, -b, -c, -f; use one of them, e.g. --zone us-central1-a "
                                      "(gcloud compute zones list)"), r.err
    assert _nothing_left(fakegcp_env) and not fakegcp_env.resources()["nodes"]


def test_flex_start_for_a_type_compute_engine_does_not_sell_names_the_zone_and_what_offers_it(fakegcp_env):
    """A refusal names the zone as a zone (not "no zone of us-central1-b", as if it were a
    region) and where flex-start can be had, so the user has a next command."""
    r = run_tpuctl_process("up", "f", "--zone", "us-central1-b", "-a", "v2-8", "--flex-start", "2h")
    assert r.code == 2, r.err
    assert r.err.splitlines()[-1] == (
        "tpuctl: error: flex-start can be had only on Compute Engine, and us-central1-b does not list v2-8 as a "
        "machine type; v2-8 is sold only through the Cloud TPU API (flex-start is for v5p, v6e, tpu7x types, on "
        "Compute Engine); use spot or on-demand (--capacity spot,on-demand), or a v5p/v6e/tpu7x type for "
        "flex-start"), r.err
    r = run_tpuctl_process("up", "f", "--zone", "us-central1-a", "-a", "v5p-8", "--flex-start", "2h")
    assert r.code == 2, r.err
    assert r.err.splitlines()[-1].startswith(
        "tpuctl: error: flex-start can be had only on Compute Engine, and us-central1-a does not list v5p-8 as a "
        "machine type; Compute Engine lists v5p-8 (ct5p-hightpu-4t) in us-east5-c"), r.err
    assert _nothing_left(fakegcp_env) and not fakegcp_env.resources()["nodes"]


def test_a_slice_stockout_is_one_line_with_the_count_of_vms(fakegcp_env):
    """A stockout of a 2-VM slice is one line with the count of VMs, not Google's message once per VM."""
    fakegcp_env.stockout("us-east5-c", kind="compute-tpu", model="SPOT")
    r = run_tpuctl_process("up", "s", "--zone", "us-east5-c", "-a", "v5p-16", "--no-vm", "--spot")
    assert r.code == 1, r.err
    (line,) = [ln for ln in r.err.splitlines() if ln.startswith("creating TPU s in us-east5-c failed: stockout: ")]
    assert line.count("ZONE_RESOURCE_POOL_EXHAUSTED") == 1 and line.count("currently unavailable") == 1, line
    assert line.startswith("creating TPU s in us-east5-c failed: stockout: ZONE_RESOURCE_POOL_EXHAUSTED: on each of "
                           "the slice's 2 VMs: The zone 'projects/tpuctl-test/zones/us-east5-c' does not have enough "
                           "resources available"), line
    assert _nothing_left(fakegcp_env)


def test_down_idle_dry_run_clears_no_range_reservation_of_a_compute_engine_cluster(fakegcp_env):
    """A dry run says only what the real run would do: a Compute Engine cluster has no range
    reservation to clear (only Cloud TPU API TPUs with a reserved range do)."""
    assert run_tpuctl_process("up", "ce", "--zone", "us-east5-a", "-a", "v6e-8", "--spot", "--no-vm").code == 0
    r = run_tpuctl_process("down", "--idle", "--idle-for", "0s", "--dry-run")
    assert r.code == 0, r.err
    assert "cluster ce's local record (no host VM)" in r.out, r.out
    assert "range reservation" not in r.out, r.out
    assert run_tpuctl_process("down", "ce").code == 0
