"""A single-host Spot TPU on Compute Engine that its preemption deleted is still its cluster's TPU,
PREEMPTED, outside a run too: ``status`` shows it, ``simulate preempt`` says there is nothing to
preempt, ``up NAME`` brings it back as it was made, ``down NAME`` removes what is left.

tpuctl makes a Spot TPU VM with ``instanceTerminationAction: DELETE`` (docs/compute-engine.md), so
a preemption leaves no instance to list. What is left is Compute Engine's record of the preemption,
a zone operation of type ``compute.instances.preempted`` by ``system`` (Google's sample "List
preemption history of a Google Compute Engine instance", compute/docs/samples/
compute-preemptible-history; the fake records it: tests/fakegcp/compute_ops.system_event), and the
cluster's spec as its ``up`` cached it on this machine (provision/cluster/preempted.py).
"""

from __future__ import annotations

import pytest

from provision.basics.config import home
from tests.fakegcp import catalog

ZONE = "us-east5-a"          # lists ct6e machine types (tests/fakegcp/catalog.py)


@pytest.fixture(autouse=True)
def fast(fakegcp_env):
    fakegcp_env.set_latencies(vm_create=0.1, vm_delete=0.05, tpu_create=0.15, tpu_delete=0.1)


def _cache(name: str):
    return home() / "clusters" / "gcp" / "tpuctl-test" / f"{name}.json"


def _tpu_row(out: str, name: str) -> list[str]:
    """The cluster's row of the status table, split on its column gaps."""
    import re

    (line,) = [ln for ln in out.splitlines() if ln.startswith(f"{name} ")]
    return re.split(r"\s{2,}", line.strip())


def test_a_spot_tpu_vm_its_preemption_deleted_is_shown_preempted_made_again_and_taken_down(
        fakegcp_env, gcs_env, tpuctl):
    fake = fakegcp_env
    assert "ct6e-standard-8t" in catalog.machine_types_in(ZONE)
    bucket = gcs_env.create_bucket()
    r = tpuctl("up", "ce-b", "--zone", ZONE, "--accelerator-type", "v6e-8", "--spot", "--api", "compute",
               "--bucket", f"gs://{bucket}")
    assert r.code == 0, r.err

    r = tpuctl("simulate", "preempt", "ce-b", "--grace", "1")
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == "TPU ce-b in us-east5-a is gone: powered off and deleted (1 s after the notice)"
    assert [i["name"] for i in fake.resources()["instances"]] == ["ce-b"]      # the host VM only
    preempted = [o for o in fake.resources()["computeOperations"]
                 if o.get("operationType") == "compute.instances.preempted"]
    assert [(o["targetLink"].rsplit("/", 1)[-1], o["user"]) for o in preempted] == [("ce-b-tpu", "system")]

    # status: the cluster, its host VM and its TPU PREEMPTED (nothing billed for it), exit 0
    for args in (("status", "ce-b"), ("status",)):
        r = tpuctl(*args)
        assert r.code == 0, r.err
        assert _tpu_row(r.out, "ce-b") == ["ce-b", "us-east5-a", "RUNNING", "v6e-8 (vm)", "compute", "PREEMPTED", "-",
                                           "-", "spot", "-", "-", "0.07"]
        assert "ce-b: TPU v6e-8 $0.00/hour (PREEMPTED: nothing billed)" in r.out.splitlines()
    (st,) = tpuctl("status", "ce-b", "--json").json()["clusters"]
    assert (st["tpu"]["state"], st["tpu"]["api"], st["tpu"]["capacity"], st["tpu"]["zone"]) == \
        ("PREEMPTED", "compute", "spot", ZONE)

    # nothing to preempt: one line, a usage error, nothing asked of the cloud's admin
    r = tpuctl("simulate", "preempt", "ce-b", "--no-notice")
    assert r.code == 2
    assert r.err.splitlines()[-1] == ("tpuctl: error: TPU ce-b in us-east5-a is PREEMPTED already: Compute Engine "
                                      "deleted its VM, so there is nothing to preempt; run tpuctl up ce-b to "
                                      "bring it back")

    # up NAME alone: the TPU again as it was made (type, zone, spot, Compute Engine), the host VM kept
    fake.clear_calls()
    r = tpuctl("up", "ce-b")
    assert r.code == 0, r.err
    assert "up ce-b: as its up made it (this machine's cluster cache): v6e-8 in us-east5-a, spot, Compute Engine" \
        in r.err.splitlines()
    assert r.out.splitlines()[0] == ("cluster ce-b is up in us-east5-a: TPU v6e-8 (vm, spot, Compute Engine) "
                                     "READY/HEALTHY, host VM e2-standard-2")
    (tpu,) = [i for i in fake.resources()["instances"] if i["name"] == "ce-b-tpu"]
    assert tpu["scheduling"]["provisioningModel"] == "SPOT" and tpu["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert tpu["machineType"].endswith("/machineTypes/ct6e-standard-8t")
    assert fake.call_counts().get("compute.instances.insert") == 1                  # the TPU only
    r = tpuctl("status", "ce-b")
    assert _tpu_row(r.out, "ce-b")[3:6] == ["v6e-8 (vm)", "compute", "READY"]

    # preempted again, then down: the host VM goes, the cluster is forgotten, the old records stay
    assert tpuctl("simulate", "preempt", "ce-b", "--no-notice").code == 0
    r = tpuctl("down", "ce-b")
    assert r.code == 0, r.err
    assert r.out.splitlines()[:2] == [
        "deleted: VM ce-b (us-east5-a)",
        "TPU ce-b (us-east5-a) was PREEMPTED: Compute Engine deleted its VM then, so nothing of it is left to delete"]
    assert fake.resources()["instances"] == [] and not _cache("ce-b").exists()
    r = tpuctl("status", "ce-b")
    assert r.code == 2 and r.err.splitlines()[-1].startswith("tpuctl: error: no cluster named ce-b")


def test_without_a_host_vm_the_preempted_tpu_is_still_a_cluster_until_down(fakegcp_env, tpuctl):
    """``--no-vm``: the TPU was all the cloud had of the cluster; its preemption record and the
    cached spec keep it a cluster (status lists it; down forgets it, and it stays forgotten)."""
    assert tpuctl("up", "ce-n", "--zone", ZONE, "-a", "v6e-8", "--spot", "--api", "compute", "--no-vm").code == 0
    assert tpuctl("simulate", "preempt", "ce-n", "--no-notice").code == 0
    r = tpuctl("status")
    assert r.code == 0, r.err
    assert _tpu_row(r.out, "ce-n") == ["ce-n", "us-east5-a", "-", "v6e-8 (vm)", "compute", "PREEMPTED", "-", "-", "spot",
                                       "-", "-", "0.00"]
    r = tpuctl("down", "ce-n")
    assert r.code == 0, r.err
    assert r.out.splitlines()[:2] == [
        "deleted: nothing",
        "TPU ce-n (us-east5-a) was PREEMPTED: Compute Engine deleted its VM then, so nothing of it is left to delete"]
    assert not _cache("ce-n").exists()
    assert "ce-n" not in tpuctl("status").out
    r = tpuctl("status", "ce-n")
    assert r.code == 2 and r.err.splitlines()[-1].startswith("tpuctl: error: no cluster named ce-n")
