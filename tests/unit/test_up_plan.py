"""What ``up`` decides before it creates anything (provision/cluster/plan.py), without I/O.

Each test builds the observed state by hand (the cluster's resources, the candidates and each
zone's fit) and reads the ``UpPlan``: the zones in the order asked, the first type and capacity,
whether a TPU Node's range is needed and which, and the resources adopted or to be made. The
cloud's reads a decision does not need are not made: ``reserved`` and ``used`` fail when called.
"""

from __future__ import annotations

import pytest

from provision.basics.errors import UsageError
from provision.catalog.accelerators import parse
from provision.cloud import base
from provision.cloud.base import DEFAULT_POOL, Arch, ClusterSpec, TpuNode, TpuState, Vm
from provision.cluster import plan
from provision.cluster.candidates import Candidate
from provision.cluster.offers import ZoneFit


def never(*_args):
    raise AssertionError("this plan must not read the cloud's ranges")


NOTHING = plan.Existing()     # a cluster with no resources yet


def make(spec, existing=NOTHING, cands=(), fits=None, *, reserved=never, used=never, offers_queued=True):
    zones = plan.zone_order(spec, existing)
    return plan.make(spec, existing, zones, cands, fits or {}, reserved=reserved, used=used, pool=DEFAULT_POOL,
                     provider="gcp", offers_queued=offers_queued)


def test_a_new_tpu_vm_goes_to_the_first_candidate_zone_with_its_image_and_host():
    spec = ClusterSpec(name="lab", accelerator_type="v5litepod-8", zones=("us-west4-a", "us-central1-a"),
                       provider="gcp", spot=True)
    v5e = parse("v5litepod-8")
    cands = (Candidate(v5e, "us-central1-a", 4.0, "spot"), Candidate(v5e, "us-west4-a", 5.0, "spot"))
    fits = {("v5litepod-8", z): ZoneFit(z, "v2-alpha-tpuv5-lite", "e2-standard-4", api="tpu")
            for z in ("us-west4-a", "us-central1-a")}
    got = make(spec, cands=cands, fits=fits)
    assert got.zones == ("us-central1-a", "us-west4-a")        # the candidates' order, not the flag's
    assert got.need_tpu and got.need_vm and not got.needs_range
    assert (got.block, got.had) == (None, None)
    assert got.planned == ("TPU lab v5litepod-8 in us-central1-a, image v2-alpha-tpuv5-lite",
                           "VM lab e2-standard-4 in us-central1-a")
    assert got.adopted == () and got.notes == ()
    assert got.as_planned.runtime_version == "v2-alpha-tpuv5-lite"
    assert got.spec.capacities[0].value == "spot"


def test_several_types_ask_for_the_first_candidates_type_and_say_the_order():
    spec = ClusterSpec(name="lab", accelerator_type="v5litepod-8", accelerator_types=("v5litepod-8", "v6e-8"),
                       zones=("us-west4-a", "us-east5-b"), provider="gcp", machine_type=None)
    cands = (Candidate(parse("v6e-8"), "us-east5-b", 8.0), Candidate(parse("v5litepod-8"), "us-west4-a", 4.0))
    got = make(spec, cands=cands)
    assert got.spec.accelerator_type == "v6e-8"
    assert got.zones == ("us-east5-b", "us-west4-a")
    assert not got.need_vm and got.planned == ("TPU lab v6e-8 in us-east5-b",)
    assert got.notes == (("candidates cheapest first per peak bf16 FLOP/s: v6e-8 in us-east5-b ($8.00/hour, "
                          "$1.09 per peak bf16 PFLOP/s-hour), v5litepod-8 in us-west4-a ($4.00/hour, "
                          "$2.54 per peak bf16 PFLOP/s-hour)"),)


def test_a_new_tpu_node_takes_the_first_free_range_and_knows_the_reservation_it_had():
    spec = ClusterSpec(name="lab", accelerator_type="v2-8", zones=("us-central1-b",), provider="gcp",
                       arch="node", preemptible=True)
    cands = (Candidate(parse("v2-8"), "us-central1-b"),)
    got = make(spec, cands=cands, reserved=lambda: None,
               used=lambda: [base.Used.of("10.240.0.0/29", "another cluster's TPU")])
    assert got.needs_range
    assert (got.block, got.had) == ("10.240.0.8/29", None)
    assert got.planned[0] == "TPU lab v2-8 in us-central1-b with range 10.240.0.8/29"


def test_a_tpu_node_with_a_reservation_gets_it_back_without_listing_the_network():
    spec = ClusterSpec(name="lab", accelerator_type="v2-8", zones=("us-central1-b",), provider="gcp", arch="node")
    got = make(spec, cands=(Candidate(parse("v2-8"), "us-central1-b"),), reserved=lambda: "10.240.0.64/29")
    assert (got.block, got.had) == ("10.240.0.64/29", "10.240.0.64/29")


def test_a_users_block_that_conflicts_is_refused_before_anything_is_made():
    spec = ClusterSpec(name="lab", accelerator_type="v2-8", zones=("us-central1-b",), provider="gcp", arch="node",
                       cidr="10.240.0.0/29")
    with pytest.raises(UsageError):
        make(spec, cands=(Candidate(parse("v2-8"), "us-central1-b"),), reserved=lambda: None,
             used=lambda: [base.Used.of("10.240.0.0/28", "a subnetwork")])


def test_a_preempted_tpu_is_replaced_in_its_zone_first_with_its_image_and_range():
    spec = ClusterSpec(name="lab", accelerator_type="v3-8", zones=("europe-west4-a", "us-central1-a"),
                       provider="gcp", preemptible=True, machine_type=None)
    old = TpuNode("lab", "us-central1-a", Arch.VM, "v3-8", TpuState.PREEMPTED, preemptible=True,
                  version="tpu-vm-tf-2.16.1-pjrt", cidr_block="10.0.0.0/29")
    existing = plan.Existing(tpu=old)
    assert plan.zone_order(spec, existing) == ["us-central1-a", "europe-west4-a"]
    assert plan.image_to_keep(existing, None) == "tpu-vm-tf-2.16.1-pjrt"
    got = make(spec, existing, cands=(Candidate(parse("v3-8"), "us-central1-a"),))
    assert got.planned == ("TPU lab in us-central1-a (replacing the PREEMPTED one)",)
    assert got.block == "10.0.0.0/29" and not got.needs_range      # a TPU VM's own block, not a reserved one


def test_a_live_tpu_is_adopted_in_its_zone_and_one_of_another_type_or_tier_is_refused():
    spec = ClusterSpec(name="lab", accelerator_type="v3-8", zones=("europe-west4-a", "us-central1-a"),
                       provider="gcp", machine_type=None)
    live = TpuNode("lab", "us-central1-a", Arch.VM, "v3-8", TpuState.READY)
    adopted, prefer = plan.adopt_tpu(spec, live, None)
    assert prefer == ("v3-8", "us-central1-a")
    got = make(adopted, plan.Existing(tpu=live))
    assert got.zones == ("us-central1-a",) and not got.need_tpu
    assert got.adopted == ("TPU lab (us-central1-a, READY)",) and got.planned == ()
    with pytest.raises(UsageError, match="already has a v2-8 TPU"):
        plan.adopt_tpu(spec, TpuNode("lab", "us-central1-a", Arch.VM, "v2-8", TpuState.READY), None)
    with pytest.raises(UsageError, match="already has a preemptible TPU"):
        plan.adopt_tpu(spec, TpuNode("lab", "us-central1-a", Arch.VM, "v3-8", TpuState.READY, preemptible=True),
                       None)


def test_a_tpu_nodes_host_keeps_it_in_the_hosts_region():
    spec = ClusterSpec(name="lab", accelerator_type="v2-8", zones=("us-central1-a", "europe-west4-a", "us-central1-b"),
                       provider="gcp", arch="node")
    host = Vm("lab", "us-central1-b", base.VmState.RUNNING, "e2-standard-4")
    assert plan.zone_order(spec, plan.Existing(vm=host)) == ["us-central1-b", "us-central1-a"]
    far = Vm("lab", "asia-east1-c", base.VmState.RUNNING)
    with pytest.raises(UsageError, match="outside the zones given"):
        plan.zone_order(spec, plan.Existing(vm=far))


def test_a_live_queued_request_is_waited_for_first_and_the_spot_tier_is_said():
    spec = ClusterSpec(name="lab", accelerator_type="v5litepod-8", zones=("us-west4-a", "us-east1-c"),
                       provider="gcp", spot=True, queued=True, machine_type=None)
    req = base.QueuedRequest("lab", "us-east1-c", base.QueuedState.WAITING_FOR_RESOURCES, "v5litepod-8", spot=True)
    adopted, prefer = plan.adopt_request(spec, req, None)
    assert prefer == ("v5litepod-8", "us-east1-c")
    existing = plan.Existing(request=req)
    assert plan.zone_order(adopted, existing) == ["us-east1-c", "us-west4-a"]
    got = make(adopted, existing, cands=(Candidate(parse("v5litepod-8"), "us-east1-c"),))
    assert got.queued and got.adopted == ("queued resource lab (us-east1-c, WAITING_FOR_RESOURCES)",)
    assert got.planned == ()      # nothing new is asked for: the request is waited for
    with pytest.raises(UsageError, match="queued resource for a spot TPU"):
        plan.adopt_request(ClusterSpec(name="lab", accelerator_type="v5litepod-8", zones=("us-east1-c",),
                                       provider="gcp", queued=True), req, None)


def test_preemptible_and_queued_asks_for_spot_and_says_so_and_a_provider_without_queues_says_that():
    spec = ClusterSpec(name="lab", accelerator_type="v5litepod-8", zones=("us-west4-a",), provider="gcp",
                       preemptible=True, queued=True, machine_type=None)
    cands = (Candidate(parse("v5litepod-8"), "us-west4-a"),)
    got = make(spec, cands=cands)
    assert got.planned == ("TPU lab v5litepod-8 in us-west4-a through a queued resource",)
    assert got.said == got.notes and "Spot TPU VM" in got.notes[0]
    direct = make(spec, cands=cands, offers_queued=False)
    assert not direct.queued and direct.said == ()
    assert direct.notes == (("the gcp provider has no queued resources: --queued created the TPU directly "
                             "(it matters on Google Cloud)"),)


def test_a_tpu_of_another_capacity_says_how_to_replace_it():
    """docs/own-code.md's `up lab` made an on-demand TPU; `up lab --preemptible` to practise a
    preemption must say how to get there, in English."""
    spec = ClusterSpec(name="lab", accelerator_type="v2-8", zones=("us-central1-b",), provider="gcp",
                       machine_type=None, preemptible=True)
    with pytest.raises(UsageError) as caught:
        plan.adopt_tpu(spec, TpuNode("lab", "us-central1-b", Arch.VM, "v2-8", TpuState.READY), None)
    assert caught.value.one_line() == (
        "cluster lab already has an on-demand TPU; a TPU's capacity cannot be changed in place; "
        "replace it: tpuctl down lab --keep-vm, then tpuctl up lab with the capacity you want (the host VM, bucket "
        "and range stay); or run tpuctl up lab as it is")
